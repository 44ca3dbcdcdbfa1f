"""Who may do what: ``gpuyard users``, ``groups``, ``quota``, ``pools`` and ``label``.

Reading is open to every signed-in user (the list of users to admins); changes are for admins
(the server says so when you are not one).
Each noun without a sub-command lists, like ``gpuyard users``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpuyard.client import Client
    from gpuyard.models import GroupView, NodeLabels, PoolView, QuotaView, UserView

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
UserOpt = Annotated[str | None, typer.Option("--user", "-u", help="A user.")]
GroupOpt = Annotated[str | None, typer.Option("--group", "-g", help="A group.")]

users_app = typer.Typer(help="Users: list, add, change group, role or share.")
groups_app = typer.Typer(help="Groups: list, add, set the urgent limit, remove.")
quota_app = typer.Typer(help="Quotas per user or group and tier, in nodes and/or GPUs.")
pools_app = typer.Typer(help="Pools and their policies (preemption, zones, notice).")


def register(app: typer.Typer) -> None:
    app.add_typer(users_app, name="users")
    app.add_typer(groups_app, name="groups")
    app.add_typer(quota_app, name="quota")
    app.add_typer(pools_app, name="pools")
    app.command()(label)


def _client() -> Client:
    from gpuyard.client import Client

    return Client()


# -- users --------------------------------------------------------------------------------


@users_app.callback(invoke_without_command=True)
def users_main(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List users (also `gpuyard users ls`)."""
    if ctx.invoked_subcommand is None:
        users_ls(as_json)


@users_app.command("ls")
def users_ls(as_json: JsonOpt = False) -> None:
    """List users with their group, role, share and the tiers they may use."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    items = _client().users()
    if as_json:
        print_json(items)
        return
    table = Table("NAME", "GROUP", "ROLE", "SHARE", "TIERS", box=None)
    for u in items:
        table.add_row(u.name, u.group or "-", u.role.value, f"{u.share:g}", _tiers(u))
    console().print(table)


@users_app.command("show")
def users_show(
    name: Annotated[str | None, typer.Argument(help="A user (default: you).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one user (default: you, as your token says)."""
    _print_user(_client().user_info(name), as_json)


@users_app.command("add")
def users_add(
    name: str,
    group: Annotated[str, typer.Option("--group", "-g", help="An existing group.")] = "default",
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an admin.")] = False,
    share: Annotated[float, typer.Option(help="Fair-share weight inside a tier.")] = 1.0,
    os_user: Annotated[
        str | None,
        typer.Option(
            help="The OS account its jobs run as (default: gpy-<name>, made by the pool)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a user (admins only); give them a token with `gpuyard tokens create NAME`."""
    role = "admin" if admin else "user"
    created = _client().create_user(name, group=group, role=role, share=share, os_user=os_user)
    _print_user(created, as_json)


@users_app.command("set")
def users_set(
    name: str,
    group: Annotated[str | None, typer.Option("--group", "-g", help="Move to this group.")] = None,
    role: Annotated[str | None, typer.Option(help="user or admin.")] = None,
    share: Annotated[float | None, typer.Option(help="Fair-share weight inside a tier.")] = None,
    os_user: Annotated[
        str | None,
        typer.Option(help='Run its jobs as this OS account ("" returns to the default).'),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a user's group, role, share or OS account (admins only)."""
    changed = _client().update_user(name, group=group, role=role, share=share, os_user=os_user)
    _print_user(changed, as_json)


def _tiers(user: UserView) -> str:
    return ", ".join(t.value for t in user.tiers)


def _print_user(user: UserView, as_json: bool) -> None:
    from gpuyard.cli.output import console, print_json

    if as_json:
        print_json(user)
        return
    console().print(
        f"{user.name}: {user.role.value} in group {user.group or '-'}, share {user.share:g}, "
        f"may use {_tiers(user)}" + (f", jobs run as {user.os_user}" if user.os_user else ""),
        highlight=False,
        markup=False,
    )


# -- groups -------------------------------------------------------------------------------


@groups_app.callback(invoke_without_command=True)
def groups_main(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List groups (also `gpuyard groups ls`)."""
    if ctx.invoked_subcommand is None:
        groups_ls(as_json)


@groups_app.command("ls")
def groups_ls(as_json: JsonOpt = False) -> None:
    """List groups with their members and urgent jobs against the limit."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    items = _client().groups()
    if as_json:
        print_json(items)
        return
    table = Table("NAME", "URGENT JOBS", "MEMBERS", box=None)
    for g in items:
        table.add_row(g.name, _urgent(g), ", ".join(g.members) or "-")
    console().print(table)


@groups_app.command("add")
def groups_add(
    name: str,
    urgent_limit: Annotated[
        int | None, typer.Option(help="Most running + queued urgent jobs (default: no limit).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a group (admins only)."""
    _print_group(_client().create_group(name, urgent_limit=urgent_limit), as_json)


@groups_app.command("set")
def groups_set(
    name: str,
    urgent_limit: Annotated[
        int | None, typer.Option(help="Most running + queued jobs at the urgent tier.")
    ] = None,
    no_urgent_limit: Annotated[
        bool, typer.Option("--no-urgent-limit", help="Remove the limit.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Set or remove a group's limit on urgent jobs (admins only)."""
    from gpuyard.errors import InvalidSpec

    if (urgent_limit is None) == (not no_urgent_limit):
        raise InvalidSpec("give either --urgent-limit N or --no-urgent-limit")
    _print_group(_client().set_urgent_limit(name, urgent_limit), as_json)


@groups_app.command("rm")
def groups_rm(name: str) -> None:
    """Remove an empty group and its quotas (admins only)."""
    from gpuyard.cli.output import console

    _client().delete_group(name)
    console().print(f"group {name}: removed", highlight=False, markup=False)


def _urgent(group: GroupView) -> str:
    limit = "no limit" if group.urgent_limit is None else f"limit {group.urgent_limit}"
    return f"{group.urgent_jobs} ({limit})"


def _print_group(group: GroupView, as_json: bool) -> None:
    from gpuyard.cli.output import console, print_json

    if as_json:
        print_json(group)
        return
    console().print(
        f"group {group.name}: urgent jobs {_urgent(group)}, members: "
        f"{', '.join(group.members) or 'none'}",
        highlight=False,
        markup=False,
    )


# -- quotas -------------------------------------------------------------------------------


def _subject(user: str | None, group: str | None, *, required: bool) -> tuple[str, str] | None:
    from gpuyard.errors import InvalidSpec

    if user and group:
        raise InvalidSpec("give --user or --group, not both")
    if user:
        return "user", user
    if group:
        return "group", group
    if required:
        raise InvalidSpec("give --user NAME or --group NAME: whose quota it is")
    return None


@quota_app.callback(invoke_without_command=True)
def quota_main(
    ctx: typer.Context, user: UserOpt = None, group: GroupOpt = None, as_json: JsonOpt = False
) -> None:
    """List quotas with what is in use (also `gpuyard quota ls`)."""
    if ctx.invoked_subcommand is None:
        quota_ls(user, group, as_json)


@quota_app.command("ls")
def quota_ls(user: UserOpt = None, group: GroupOpt = None, as_json: JsonOpt = False) -> None:
    """List quotas (of one user or group with --user / --group)."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    subject = _subject(user, group, required=False)
    kind, name = subject if subject else (None, None)
    items = _client().quotas(kind=kind, subject=name)
    if as_json:
        print_json(items)
        return
    table = Table("KIND", "NAME", "TIER", "NODES (USED/LIMIT)", "GPUS (USED/LIMIT)", box=None)
    for q in items:
        table.add_row(q.kind.value, q.subject, q.tier.value, *_quota_cells(q))
    console().print(table)


@quota_app.command("set")
def quota_set(
    tier: Annotated[str, typer.Argument(help="low, normal, high or highest.")],
    user: UserOpt = None,
    group: GroupOpt = None,
    nodes: Annotated[int | None, typer.Option(help="Most nodes held at once.")] = None,
    gpus: Annotated[int | None, typer.Option(help="Most GPUs held at once.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a user's or group's quota at one tier (admins only).

    For example `gpuyard quota set normal --user alice --nodes 10`; it replaces the quota
    there was."""
    from gpuyard.cli.output import console, print_json

    kind, name = _subject(user, group, required=True) or ("", "")
    quota = _client().set_quota(kind, name, tier.strip().lower(), nodes=nodes, gpus=gpus)
    if as_json:
        print_json(quota)
        return
    nodes_cell, gpus_cell = _quota_cells(quota)
    console().print(
        f"{kind} {name} at {quota.tier.value}: nodes {nodes_cell}, GPUs {gpus_cell}",
        highlight=False,
        markup=False,
    )


@quota_app.command("clear")
def quota_clear(
    tier: Annotated[str, typer.Argument(help="low, normal, high or highest.")],
    user: UserOpt = None,
    group: GroupOpt = None,
) -> None:
    """Remove a user's or group's quota at one tier (admins only)."""
    from gpuyard.cli.output import console

    kind, name = _subject(user, group, required=True) or ("", "")
    tier = tier.strip().lower()
    _client().clear_quota(kind, name, tier)
    console().print(f"{kind} {name} at {tier}: no quota", highlight=False, markup=False)


def _quota_cells(q: QuotaView) -> tuple[str, str]:
    def cell(used: int, limit: int | None) -> str:
        return f"{used}/{'-' if limit is None else limit}"

    return cell(q.used_nodes, q.nodes), cell(q.used_gpus, q.gpus)


# -- pools --------------------------------------------------------------------------------


@pools_app.callback(invoke_without_command=True)
def pools_main(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List pools (also `gpuyard pools ls`)."""
    if ctx.invoked_subcommand is None:
        pools_ls(as_json)


@pools_app.command("ls")
def pools_ls(as_json: JsonOpt = False) -> None:
    """List pools: their policy and nodes (nodes join a pool by their `pool` label)."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json
    from gpuyard.quantities import format_duration

    items = _client().pools()
    if as_json:
        print_json(items)
        return
    table = Table(box=None)
    # A narrow terminal folds the lists (slices, nodes) and the headers, never a name.
    table.add_column("NAME", no_wrap=True)
    for header in ("POLICY", "PREEMPTION", "ZONES", "NOTICE", "GROW AFTER"):
        table.add_column(header)
    table.add_column("SLICES", overflow="fold", min_width=4)
    for header in ("HALF-LIFE", "MIN RUN"):
        table.add_column(header)
    table.add_column("NODES", overflow="fold", min_width=4)
    for p in items:
        table.add_row(
            p.name,
            "set" if p.declared else "default",
            p.preemption.value,
            "same" if p.same_zone else "any",
            format_duration(p.notice),
            format_duration(p.grow_after),
            _format_slices(p.slices),
            _format_guard(p.age_halflife),
            _format_guard(p.min_run),
            ",".join(p.nodes) or "-",
        )
    out = console()
    out.print(table)
    for p in items:  # below the table: a sentence squeezed into a column is unreadable
        if p.description:
            out.print(f"{p.name}: {p.description}", highlight=False, markup=False)


PreemptionOpt = Annotated[
    str | None,
    typer.Option(help="never (higher tiers only wait ahead) or suspend (they take the room)."),
]
SameZoneOpt = Annotated[
    bool | None,
    typer.Option("--same-zone/--any-zone", help="Keep each multi-node gang in one zone."),
]
NoticeOpt = Annotated[
    str | None, typer.Option(help="Time a preempted job has to checkpoint, e.g. 60s, 5m.")
]
GrowAfterOpt = Annotated[
    str | None, typer.Option(help="Time an elastic job runs before it may grow, e.g. 2m.")
]
DescriptionOpt = Annotated[str | None, typer.Option(help="What the pool is for.")]
AgeHalflifeOpt = Annotated[
    str | None,
    typer.Option(
        help="Time-slicing's aging: a waiting job's service counts half per this time waited "
        "(or per its run time, if longer), e.g. 3h; 'off'. Default with slices: 3h."
    ),
]
MinRunOpt = Annotated[
    str | None,
    typer.Option(
        help="Time-slicing's quantum: its own tier does not suspend a job before it ran this "
        "long, doubled per suspension, e.g. 1h; 'off'. Default with slices: 1h."
    ),
]
SlicesOpt = Annotated[
    str | None,
    typer.Option(
        help="Time-slicing bands in GPU-time, comma-separated, e.g. 1h,10h,100h (GPU-hours); "
        "'none' removes them."
    ),
]


FloorOpt = Annotated[
    float | None,
    typer.Option(
        help="GB/s of all-reduce bus bandwidth below which the node check fails a node; "
        "0 removes it."
    ),
]


IdleTimeoutOpt = Annotated[
    str | None,
    typer.Option(
        help="How long an interactive job of this pool may sit idle before it is reclaimed, "
        "e.g. 2h (default: GPUYARD_IDLE_TIMEOUT); 0 removes it."
    ),
]


def _slices(text: str | None) -> list[str] | None:
    if text is None:
        return None
    if text.strip().lower() in ("", "none"):
        return []
    return [part.strip() for part in text.split(",") if part.strip()]


@pools_app.command("add")
def pools_add(
    name: str,
    preemption: PreemptionOpt = None,
    same_zone: SameZoneOpt = None,
    notice: NoticeOpt = None,
    grow_after: GrowAfterOpt = None,
    slices: SlicesOpt = None,
    age_halflife: AgeHalflifeOpt = None,
    min_run: MinRunOpt = None,
    allreduce_floor: FloorOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    description: DescriptionOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Declare a pool's policy (admins only); add nodes with `gpuyard label NODE pool=NAME`."""
    pool = _client().create_pool(
        name,
        preemption=preemption or "never",
        same_zone=bool(same_zone),
        notice=notice or 60.0,
        grow_after=grow_after or 60.0,
        slices=_slices(slices) or [],
        age_halflife=age_halflife,
        min_run=min_run,
        allreduce_floor=allreduce_floor or None,
        idle_timeout=idle_timeout,
        description=description or "",
    )
    _print_pool(pool, as_json)


@pools_app.command("set")
def pools_set(
    name: str,
    preemption: PreemptionOpt = None,
    same_zone: SameZoneOpt = None,
    notice: NoticeOpt = None,
    grow_after: GrowAfterOpt = None,
    slices: SlicesOpt = None,
    age_halflife: AgeHalflifeOpt = None,
    min_run: MinRunOpt = None,
    allreduce_floor: FloorOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    description: DescriptionOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a pool's policy (admins only); the options not given stay (but giving slices
    to a pool that had none sets an aging and quantum it lacks to 3h and 1h)."""
    pool = _client().update_pool(
        name,
        preemption=preemption,
        same_zone=same_zone,
        notice=notice,
        grow_after=grow_after,
        slices=_slices(slices),
        age_halflife=age_halflife,
        min_run=min_run,
        allreduce_floor=allreduce_floor,
        idle_timeout=idle_timeout,
        description=description,
    )
    _print_pool(pool, as_json)


def _format_slices(slices: list[float]) -> str:
    """In GPU-hours, as they are given: 1h,10h,100h."""
    return ",".join(f"{s / 3600:g}h" for s in slices) if slices else "none"


def _format_guard(seconds: float | None) -> str:
    from gpuyard.quantities import format_duration

    return "off" if seconds is None else format_duration(seconds)


def _print_pool(pool: PoolView, as_json: bool) -> None:
    from gpuyard.cli.output import console, print_json
    from gpuyard.quantities import format_duration

    if as_json:
        print_json(pool)
        return
    console().print(
        f"pool {pool.name}: preemption {pool.preemption.value}, "
        f"{'same zone' if pool.same_zone else 'any zone'}, notice "
        f"{format_duration(pool.notice)}, grow after {format_duration(pool.grow_after)}, "
        f"slices {_format_slices(pool.slices)}, age half-life "
        f"{_format_guard(pool.age_halflife)}, min run {_format_guard(pool.min_run)}, "
        + (f"all-reduce floor {pool.allreduce_floor:g} GB/s, " if pool.allreduce_floor else "")
        + (f"idle timeout {format_duration(pool.idle_timeout)}, " if pool.idle_timeout else "")
        + f"nodes: {', '.join(pool.nodes) or 'none'}",
        highlight=False,
        markup=False,
    )


# -- node labels --------------------------------------------------------------------------


def parse_label_args(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """``KEY=VALUE`` sets a label, ``KEY-`` removes one (as kubectl label does)."""
    from gpuyard.errors import InvalidSpec

    sets: dict[str, str] = {}
    removes: list[str] = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key:
            sets[key] = value
        elif not sep and arg.endswith("-") and len(arg) > 1:
            removes.append(arg[:-1])
        else:
            raise InvalidSpec(f"label takes KEY=VALUE to set or KEY- to remove (got {arg!r})")
    return sets, removes


def label(
    node: Annotated[str, typer.Argument(help="A node (see `gpuyard nodes`).")],
    changes: Annotated[
        list[str] | None,
        typer.Argument(help="KEY=VALUE to set, KEY- to remove; none: show the labels."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show or change a node's labels: pool, zone, network, driver, anything.

    Changes are for admins; their labels win over the ones the node's executor reports."""
    client = _client()
    if not changes:
        _print_labels(client.node_labels(node), as_json)
        return
    sets, removes = parse_label_args(changes)
    _print_labels(client.label(node, set=sets, remove=removes), as_json)


def _print_labels(labels: NodeLabels, as_json: bool) -> None:
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    if as_json:
        print_json(labels)
        return
    table = Table("KEY", "VALUE", "SET BY", box=None)
    for key, value in sorted(labels.effective.items()):
        table.add_row(key, value, "admin" if key in labels.extra_labels else "executor")
    out = console()
    out.print(f"node {labels.node}", highlight=False, markup=False)
    out.print(table)
