"""The image catalogue: ``gpuyard images ls|show|push|rm|share``, and your logins at the
registries images are copied from: ``gpuyard images login|logout|logins`` (docs/images.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpuyard.client import Client
    from gpuyard.models.image_catalogue import ImageView

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
NameArg = Annotated[str, typer.Argument(help="The image, e.g. alice/train:3.")]

images_app = typer.Typer(
    help="Images jobs run in: list, show, push, remove, share; logins at registries copied from."
)
HostArg = Annotated[
    str, typer.Argument(help="A registry the pool copies images from, HOST[:PORT].")
]


def register(app: typer.Typer) -> None:
    app.add_typer(images_app, name="images")


def _client() -> Client:
    from gpuyard.client import Client

    return Client()


def _size(size: int) -> str:
    from gpuyard.quantities import format_bytes

    return format_bytes(size)


@images_app.callback(invoke_without_command=True)
def images_main(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the images you may use (also `gpuyard images ls`)."""
    if ctx.invoked_subcommand is None:
        images_ls(None, None, as_json)


@images_app.command("ls")
def images_ls(
    scope: Annotated[str | None, typer.Option(help="training or development.")] = None,
    accelerator: Annotated[
        str | None, typer.Option(help="Those built for this accelerator kind, and for any.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the catalogue's images you may use."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    found = _client().images(scope=scope, accelerator=accelerator)
    if as_json:
        print_json(found)
        return
    table = Table("NAME", "OWNER", "VISIBILITY", "SCOPE", "ACCELERATOR", "SIZE", box=None)
    for image in found:
        table.add_row(
            image.name,
            image.owner,
            image.visibility.value,
            image.scope.value,
            image.accelerator or "any",
            _size(image.size),
        )
    console().print(table)


def _print(image: ImageView) -> None:
    from gpuyard.cli.output import console

    lines = [
        ("name", image.name),
        ("digest", image.digest),
        ("owner", image.owner),
        ("visibility", image.visibility.value),
        ("scope", image.scope.value),
        ("accelerator", image.accelerator or "any"),
        ("size", _size(image.size)),
        ("pushed", f"{image.pushed_at:%Y-%m-%d %H:%M} by {image.pushed_by}"),
        ("description", image.description or "-"),
    ]
    for key, value in lines:
        console().print(f"{key:<12} {value}", highlight=False, markup=False, soft_wrap=True)


@images_app.command("show")
def images_show(name: NameArg, as_json: JsonOpt = False) -> None:
    """One image of the catalogue."""
    from gpuyard.cli.output import print_json

    image = _client().image(name)
    if as_json:
        print_json(image)
    else:
        _print(image)


@images_app.command("push")
def images_push(
    source: Annotated[
        str,
        typer.Argument(
            help="An OCI layout directory, an OCI archive, a docker archive (docker save), or "
            "HOST/REPO:TAG of a registry the pool copies from."
        ),
    ],
    name: NameArg,
    scope: Annotated[str, typer.Option(help="training or development.")] = "training",
    accelerator: Annotated[str, typer.Option(help="The accelerator kind it is for.")] = "",
    description: Annotated[str, typer.Option(help="What it holds.")] = "",
    visibility: Annotated[
        str | None, typer.Option(help="private (default), group, public; official for admins.")
    ] = None,
    username: Annotated[
        str | None,
        typer.Option(
            help="Your user name at the registry copied from (without it: your saved login "
            "there, see `gpuyard images login`, if any)."
        ),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read that registry's password from stdin.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Push an image into the pool's registry as yours (NAME:TAG lands at YOU/NAME:TAG)."""
    from gpuyard.cli.output import print_json

    path = Path(source)
    if path.exists():
        with _Archive(path) as tar:
            image = _client().push_image(
                tar,
                name,
                scope=scope,
                accelerator=accelerator,
                description=description,
                visibility=visibility,
            )
    else:
        password = sys.stdin.readline().rstrip("\n") if password_stdin else None
        image = _client().copy_image(
            source,
            name,
            scope=scope,
            accelerator=accelerator,
            description=description,
            visibility=visibility,
            username=username,
            password=password,
        )
    if as_json:
        print_json(image)
    else:
        _print(image)


class _Archive:
    """``path`` as a tar: itself, or an OCI layout directory packed into a temporary one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.temporary: Path | None = None

    def __enter__(self) -> Path:
        if not self.path.is_dir():
            return self.path
        import tarfile
        import tempfile

        handle = tempfile.NamedTemporaryFile(suffix=".tar", delete=False)
        self.temporary = Path(handle.name)
        with handle, tarfile.open(fileobj=handle, mode="w") as tar:
            for item in sorted(self.path.rglob("*")):
                tar.add(item, arcname=str(item.relative_to(self.path)), recursive=False)
        return self.temporary

    def __exit__(self, *_exc: object) -> None:
        if self.temporary is not None:
            self.temporary.unlink(missing_ok=True)


@images_app.command("rm")
def images_rm(name: NameArg) -> None:
    """Take an image out of the catalogue (yours, or any for admins)."""
    from gpuyard.cli.output import console

    _client().delete_image(name)
    console().print(f"removed {name}", highlight=False, markup=False)


@images_app.command("share")
def images_share(
    name: NameArg,
    visibility: Annotated[
        str, typer.Argument(help="private, group, public; official for admins.")
    ] = "public",
    as_json: JsonOpt = False,
) -> None:
    """Change who may see and run an image (yours, or any for admins)."""
    from gpuyard.cli.output import print_json

    image = _client().share_image(name, visibility)
    if as_json:
        print_json(image)
    else:
        _print(image)


@images_app.command("login")
def images_login(
    host: HostArg,
    username: Annotated[
        str | None, typer.Option(help="Your user name there (asked for when not given).")
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password or token from stdin.")
    ] = False,
) -> None:
    """Save your login at a registry the pool copies from: checked with the registry, kept
    encrypted, used by your own `images push HOST/REPO:TAG NAME` without --username."""
    from gpuyard.cli.output import console

    user = username or typer.prompt("Username")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = typer.prompt("Password", hide_input=True)
    saved = _client().save_registry_login(host, username=user, password=password)
    console().print(
        f"saved your login {saved.username} for {saved.host}", highlight=False, markup=False
    )


@images_app.command("logout")
def images_logout(host: HostArg) -> None:
    """Forget your saved login at a registry."""
    from gpuyard.cli.output import console

    _client().delete_registry_login(host)
    console().print(f"forgot your login for {host}", highlight=False, markup=False)


@images_app.command("logins")
def images_logins(as_json: JsonOpt = False) -> None:
    """Your saved registry logins (never their passwords)."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    found = _client().registry_logins()
    if as_json:
        print_json(found)
        return
    table = Table("HOST", "USERNAME", "SAVED", box=None)
    for login in found:
        table.add_row(login.host, login.username, f"{login.saved_at:%Y-%m-%d %H:%M}")
    console().print(table)
