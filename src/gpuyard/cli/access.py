"""Signing in and the pool's access settings: ``gpuyard login``, ``whoami``, ``tokens``,
``sharing`` and ``audit``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpuyard.client import Client

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]

tokens_app = typer.Typer(help="API tokens: list, create, revoke.")


def register(app: typer.Typer) -> None:
    app.command()(login)
    app.command()(whoami)
    app.add_typer(tokens_app, name="tokens")
    app.command()(sharing)
    app.command()(audit)


def _client() -> Client:
    from gpuyard.client import Client

    return Client()


def login(
    url: Annotated[
        str | None, typer.Argument(help="The server (default: GPUYARD_URL or this machine's).")
    ] = None,
    token_stdin: Annotated[
        bool, typer.Option("--token-stdin", help="Read the token from standard input.")
    ] = False,
) -> None:
    """Sign in to a pool with a token an admin gave you (`gpuyard tokens create USER`); it is
    kept, readable only by you, in your config directory."""
    from gpuyard.cli.output import console
    from gpuyard.client import Client, discover_url, store_token
    from gpuyard.errors import InvalidSpec
    from gpuyard.settings import Settings

    settings = Settings()
    target = (url or discover_url(settings)).rstrip("/")
    if token_stdin:
        token = sys.stdin.readline().strip()
    else:
        token = typer.prompt("token", hide_input=True).strip()
    if not token:
        raise InvalidSpec("no token given; an admin creates one with `gpuyard tokens create USER`")
    with Client(target, token=token, settings=settings) as client:
        me = client.user_info()  # proves the token before it is kept
    path = store_token(settings, target, token)
    console().print(
        f"signed in to {target} as {me.name} ({me.role.value}); token kept in {path}",
        highlight=False,
        markup=False,
    )


def whoami(as_json: JsonOpt = False) -> None:
    """Who your token signs you in as."""
    from gpuyard.cli.output import console, print_json

    me = _client().user_info()
    if as_json:
        print_json(me)
        return
    console().print(
        f"{me.name} ({me.role.value}, group {me.group or '-'})", highlight=False, markup=False
    )


@tokens_app.callback(invoke_without_command=True)
def tokens_main(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List your tokens (also `gpuyard tokens ls`)."""
    if ctx.invoked_subcommand is None:
        tokens_ls(None, as_json)


@tokens_app.command("ls")
def tokens_ls(
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Whose (admins; * for everyone's).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List tokens: id, owner, label, expiry, last use (never the tokens themselves)."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    items = _client().tokens(user=user)
    if as_json:
        print_json(items)
        return
    table = Table("ID", "USER", "LABEL", "CREATED", "EXPIRES", "LAST USED", box=None)
    for t in items:
        table.add_row(
            str(t.id),
            t.user,
            t.label or "-",
            f"{t.created_at:%Y-%m-%d %H:%M}",
            f"{t.expires_at:%Y-%m-%d %H:%M}" if t.expires_at else "never",
            f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "-",
        )
    console().print(table)


@tokens_app.command("create")
def tokens_create(
    user: Annotated[str | None, typer.Argument(help="For whom (admins; default: you).")] = None,
    label: Annotated[str, typer.Option(help="What it is for, e.g. laptop.")] = "",
    expires: Annotated[str, typer.Option(help="Lifetime, e.g. 30d, 12h (at most 366d).")] = "90d",
    as_json: JsonOpt = False,
) -> None:
    """Create a token and print it once: it is stored only as a hash."""
    from gpuyard.cli.output import console, print_json

    issued = _client().create_token(user=user, label=label, expires_in=expires)
    if as_json:
        print_json(issued)
        return
    console().print(
        f"token {issued.id} for {issued.user}, expires {issued.expires_at:%Y-%m-%d %H:%M}; "
        "give it to them once (`gpuyard login`), it cannot be shown again:",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    print(issued.token)


@tokens_app.command("revoke")
def tokens_revoke(
    token_ids: Annotated[list[int], typer.Argument(help="Token ids (see `gpuyard tokens`).")],
) -> None:
    """Revoke tokens: they sign no one in from now on."""
    from gpuyard.cli.output import console

    client = _client()
    for token_id in token_ids:
        client.revoke_token(token_id)
        console().print(f"token {token_id} revoked")


def sharing(
    state: Annotated[
        str | None, typer.Argument(help="on or off (admins); without it, show it.")
    ] = None,
) -> None:
    """Show or switch the pool's sharing: off, no job gives its group any access."""
    from gpuyard.cli.output import console
    from gpuyard.errors import InvalidSpec

    client = _client()
    if state is None:
        settings = client.pool_settings()
    elif state.lower() in ("on", "off"):
        settings = client.update_pool_settings(sharing=state.lower() == "on")
    else:
        raise InvalidSpec(f"sharing is on or off (got {state!r})")
    console().print(f"sharing: {'on' if settings.sharing else 'off'}")


def audit(
    actor: Annotated[str | None, typer.Option(help="Only this actor, e.g. user:bob.")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action, e.g. job.stop.")] = None,
    target: Annotated[str | None, typer.Option(help="Only this target, e.g. job:12.")] = None,
    after: Annotated[int, typer.Option(help="Entries after this id.")] = 0,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Who did what to which job or setting, and when (admins)."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    items = _client().audit(after=after, limit=limit, actor=actor, action=action, target=target)
    if as_json:
        print_json(items)
        return
    table = Table("ID", "TIME", "ACTOR", "ACTION", "TARGET", "DETAIL", box=None)
    for e in items:
        table.add_row(
            str(e.id), f"{e.time:%Y-%m-%d %H:%M:%S}", e.actor, e.action, e.target, e.detail
        )
    console().print(table)
