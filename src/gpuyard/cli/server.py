"""Server commands: up, down, nodes, health."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    from gpuyard.models.health import Finding
    from gpuyard.models.node import NodeIsolation
    from gpuyard.settings import Settings

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(down)
    nodes_app = typer.Typer(
        invoke_without_command=True,
        no_args_is_help=False,
        help="List nodes and their health; show one; cordon, drain or uncordon one; remove "
        "gone ones.",
    )
    nodes_app.callback()(nodes)
    nodes_app.command("show")(show_node)
    nodes_app.command("cordon")(cordon)
    nodes_app.command("drain")(drain)
    nodes_app.command("uncordon")(uncordon)
    nodes_app.command("rm")(remove_nodes)
    app.add_typer(nodes_app, name="nodes")
    app.command()(health)


MIGRATION_CHATTER = ("Context impl ", "Will assume ")
"""The two lines Alembic logs at every start whether or not it migrates anything; a
migration that runs (``Running upgrade …``) is still logged."""


def configure_logging(stream: TextIO | None = None) -> None:
    """The log of a foreground ``gpuyard up``: INFO and above, without Alembic's chatter."""
    import logging

    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=stream,
        force=stream is not None,
    )

    def not_chatter(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(MIGRATION_CHATTER)

    logging.getLogger("alembic.runtime.migration").addFilter(not_chatter)


def up(
    port: Annotated[int | None, typer.Option(help="Port (0: any free port).")] = None,
    host: Annotated[
        str | None,
        typer.Option(
            help="Address to listen on (default 127.0.0.1; any other needs TLS or --insecure)."
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate: serve HTTPS (with --tls-key).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert.")] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Serve plain HTTP on a non-loopback address (tokens travel in clear text).",
        ),
    ] = False,
    virtual_nodes: Annotated[
        int | None, typer.Option(help="Present N virtual nodes on this machine.")
    ] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per virtual node.")] = None,
    cpus_per_node: Annotated[
        float | None,
        typer.Option(
            help="CPUs per virtual node (default: the host's / N, at least 1); may add up to "
            "more than the host has, which its cores then share."
        ),
    ] = None,
    memory_per_node: Annotated[
        str | None,
        typer.Option(help="Memory per virtual node, e.g. 8G (default: the host's / N)."),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option(help="Executor: local (this machine) or ray (a Ray cluster's nodes)."),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="The Ray cluster's address HEAD:PORT (with --executor ray)."),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Run in the background; return once ready.")
    ] = False,
) -> None:
    """Start a pool: API server, controller and an executor (this machine's, or a Ray
    cluster's nodes with --executor ray; docs/cluster.md)."""
    from gpuyard.quantities import parse_bytes
    from gpuyard.settings import Settings

    overrides: dict[str, Any] = {
        "port": port,
        "host": host,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "insecure": insecure or None,
        "virtual_nodes": virtual_nodes,
        "gpus_per_node": gpus_per_node,
        "cpus_per_node": cpus_per_node,
        "memory_per_node": parse_bytes(memory_per_node) if memory_per_node else None,
        "executor": executor,
        "ray_address": ray_address,
    }
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    if detach:
        _up_detached(settings)
        return
    from gpuyard.up import run_server

    configure_logging()

    # Started by `up --detach`, the pool has no terminal to press Ctrl-C in.
    stops = "Ctrl-C stops it" if sys.stdin.isatty() else "`gpuyard down` stops it"

    def ready(url: str) -> None:
        print(f"gpuyard pool running at {url} (home {settings.home}); {stops}", flush=True)
        print(f"web UI: {url}/ (sign in with the token in {settings.owner_token_file})", flush=True)

    from gpuyard.errors import GpuyardError

    try:
        run_server(settings, on_ready=ready)
    except GpuyardError as exc:
        raise SystemExit(f"gpuyard up: {exc.detail}") from None
    print(
        "gpuyard pool stopped; running jobs keep running and the next `gpuyard up` adopts them",
        flush=True,
    )


def _up_detached(settings: Settings) -> None:
    from gpuyard.client import Client
    from gpuyard.errors import ServerUnavailable
    from gpuyard.up import read_server_file

    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    info = read_server_file(home)
    if info and _alive(int(info["pid"])):
        print(f"gpuyard pool already running at {info['url']} (pid {info['pid']})")
        return
    argv = (
        [sys.executable, "-m", "gpuyard", "up"]
        + [
            arg
            for flag, value in (
                ("--port", settings.port),
                ("--host", settings.host),
                ("--virtual-nodes", settings.virtual_nodes),
                ("--gpus-per-node", settings.gpus_per_node),
                ("--cpus-per-node", settings.cpus_per_node),
                ("--memory-per-node", settings.memory_per_node),
                ("--tls-cert", settings.tls_cert),
                ("--tls-key", settings.tls_key),
                ("--executor", settings.executor),
                ("--ray-address", settings.ray_address),
            )
            if value is not None
            for arg in (flag, str(value))
        ]
        + (["--insecure"] if settings.insecure else [])
    )
    env = {**os.environ, "GPUYARD_HOME": str(home)}
    from gpuyard.private_files import open_private_log

    log_path = home / "pool.log"
    with os.fdopen(open_private_log(log_path), "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=env,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise SystemExit(f"gpuyard up failed (exit {proc.returncode}); log:\n{tail}")
        info = read_server_file(home)
        if info and info.get("pid") == proc.pid:
            try:
                # Health needs no token; a self-signed certificate is the pool's own here.
                Client(str(info["url"]), verify=False).health()
            except ServerUnavailable:
                pass
            else:
                print(f"gpuyard pool running at {info['url']} (pid {proc.pid}, log {log_path})")
                return
        time.sleep(0.1)
    raise SystemExit(f"gpuyard up did not become ready within 60s; see {log_path}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def down(
    timeout: Annotated[float, typer.Option(help="Seconds to wait for it to exit.")] = 30,
) -> None:
    """Stop the pool of this home. Running jobs keep running; the next `up` adopts them."""
    from gpuyard.settings import Settings
    from gpuyard.up import read_server_file

    settings = Settings()
    info = read_server_file(settings.home)
    if not info or not _alive(int(info["pid"])):
        print("no pool is running for", settings.home)
        return
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        raise SystemExit(f"pool (pid {pid}) did not exit within {timeout}s")
    print(f"pool stopped (pid {pid})")


def health(as_json: JsonOpt = False) -> None:
    """Whether the pool works: its database, whether its controller makes progress, and its
    disk (exit code 1 while the controller stalls, with its recent errors, or the disk is
    full)."""
    from datetime import UTC, datetime

    from gpuyard.cli.output import console, print_json
    from gpuyard.client import Client

    report = Client().health()
    if as_json:
        print_json(report)
    else:
        out = console()
        loop = report.get("controller") or {}
        out.print(f"status: {report['status']} (gpuyard {report['version']}, {report['database']})")
        if loop:
            last = loop.get("last_pass_at")
            when = datetime.fromtimestamp(last, UTC).isoformat(timespec="seconds") if last else "-"
            out.print(
                f"controller: {'progressing' if loop.get('progressing') else 'STALLED'}, "
                f"last pass {when}, {loop.get('passes', 0)} passes"
            )
            for error in loop.get("recent_errors", [])[-5:]:
                job = f"job {error['job']}: " if error.get("job") else ""
                out.print(f"  error: {job}{error['error']}", markup=False)
        _print_disk(out, report.get("disk"))
    if report["status"] != "ok":
        raise typer.Exit(1)


def _print_disk(out: Any, disk: dict[str, Any] | None) -> None:
    """The pool's disk: free space, its reserve, and why it is full (docs/security.md)."""
    from gpuyard.quantities import format_bytes

    if not disk:
        return
    reserve = f", reserve {format_bytes(disk['reserve'])}" if disk.get("reserve") else ""
    held = "" if disk.get("reserve_held") or not disk.get("reserve") else " RELEASED"
    out.print(
        f"disk: {format_bytes(disk['free'])} free of {format_bytes(disk['total'])}{reserve}{held}"
    )
    if disk.get("reason"):
        out.print(f"  {disk['reason']}", markup=False)


def nodes(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List nodes with used / total resources and health; why any is cordoned or unwell."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table
    from rich.text import Text

    from gpuyard.cli.output import console, print_json
    from gpuyard.client import Client
    from gpuyard.models.health import ProbeStatus, health_summary
    from gpuyard.quantities import format_bytes

    items = Client().nodes()
    if as_json:
        print_json(items)
        return
    table = Table(
        "NAME",
        "ADDRESS",
        "STATE",
        "GPUS",
        "CPUS",
        "MEMORY",
        "GPU MODEL",
        "JOBS",
        "ISOLATION",
        "HEALTH",
        box=None,
    )
    for n in items:
        table.add_row(
            n.name,
            n.address,
            n.state.value,
            f"{n.gpus_used}/{n.gpus}",
            f"{n.cpus_used:g}/{n.cpus:g}",
            f"{format_bytes(n.memory_used)}/{format_bytes(n.memory)}",
            n.gpu_model or "-",
            _jobs_column(n.jobs, n.hidden_jobs),
            Text(_isolation_cell(n.isolation)),
            Text(health_summary(n.health)),
        )
    out = console()
    out.print(table)
    for n in items:
        if n.cordon_reason:
            by = f" by {n.cordoned_by}" if n.cordoned_by else ""
            out.print(f"{n.name} cordoned{by}: {n.cordon_reason}", markup=False)
    for n in items:
        for f in n.health:
            if f.status in (ProbeStatus.CRITICAL, ProbeStatus.WARNING):
                out.print(f"{n.name} {f.status.value}: {f.describe()}", markup=False)
    if note := health_note([n.health for n in items]):
        out.print(note, markup=False)
    for n in items:
        if n.isolation is not None and n.isolation.not_enforced:
            out.print(f"{n.name} isolation: {n.isolation.describe()}", markup=False)
    if bare := [n.name for n in items if n.labels.get("isolation") == "none"]:
        out.print(
            f"[yellow]warning:[/] no cgroup isolation on {', '.join(bare)}: no memory, CPU or "
            "process limits, and processes that leave a worker's process group can outlive it "
            "(see the log of `gpuyard up`)"
        )


def health_note(healths: Sequence[Sequence[Finding]]) -> str | None:
    """What ``n/a`` in the HEALTH column means, when a node shows it."""
    from gpuyard.models.health import ProbeStatus

    if not any(f.status is ProbeStatus.NOT_AVAILABLE for h in healths for f in h):
        return None
    return (
        "HEALTH n/a: checks that could not look on that node (GPU checks without an NVIDIA "
        "driver, a counter the GPU lacks), so that part of its health is unknown, not ok; "
        "`gpuyard nodes show NODE` lists them"
    )


def _isolation_cell(isolation: NodeIsolation | None) -> str:
    """``v2 memory,pids,-cpu``: the cgroup version, each limit enforced or (``-``) not."""
    from gpuyard.models.node import CONTROLLERS, IsolationMode

    if isolation is None:
        return "-"
    if isolation.mode is IsolationMode.NONE:
        return "none"
    marks = [c if c in isolation.enforced else f"-{c}" for c in CONTROLLERS]
    return f"{isolation.mode.value.removeprefix('cgroup-')} {','.join(marks)}"


NodeArg = Annotated[str, typer.Argument(help="The node's name (see `gpuyard nodes`).")]
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why; shown in `gpuyard nodes`.")]


def show_node(node: NodeArg, as_json: JsonOpt = False) -> None:
    """One node: its state, cordon, and every probe of its latest health inspection."""
    from rich.table import Table
    from rich.text import Text

    from gpuyard.cli.output import console, print_json
    from gpuyard.client import Client
    from gpuyard.models.health import health_summary

    n = Client().node(node)
    if as_json:
        print_json(n)
        return
    out = console()
    out.print(f"{n.name} ({n.address}): {n.state.value}", markup=False)
    if n.cordon_reason:
        by = f" by {n.cordoned_by}" if n.cordoned_by else ""
        out.print(f"cordoned{by}: {n.cordon_reason}", markup=False)
    if n.inspected_at is None:
        out.print("health: not inspected yet")
        return
    when = n.inspected_at.isoformat(timespec="seconds")
    out.print(f"health: {health_summary(n.health)} (inspected {when})", markup=False)
    table = Table("PROBE", "GPU", "STATUS", "VALUE", "MESSAGE", box=None)
    for f in n.health:
        value = "-" if f.value is None else str(f.value)
        jobs = f" (jobs {', '.join(map(str, f.jobs))})" if f.jobs else ""
        table.add_row(
            f.probe.value, f.gpu or "-", f.status.value, Text(value), Text(f.message + jobs)
        )
    out.print(table)


def cordon(node: NodeArg, reason: ReasonOpt) -> None:
    """Keep a node out of scheduling; jobs running on it go on (admins)."""
    from gpuyard.cli.output import console
    from gpuyard.client import Client

    Client().cordon(node, reason)
    console().print(f"node {node} cordoned: {reason}", markup=False)


def drain(node: NodeArg, reason: ReasonOpt) -> None:
    """Cordon a node and suspend the jobs running on it, to resume elsewhere (admins)."""
    from gpuyard.cli.output import console
    from gpuyard.client import Client

    view = Client().cordon(node, reason, drain=True)
    jobs = ", ".join(map(str, view.jobs)) or "none"
    console().print(f"node {node} drained: {reason} (jobs still on it: {jobs})", markup=False)


def uncordon(node: NodeArg) -> None:
    """Let the scheduler use a cordoned node again (admins)."""
    from gpuyard.cli.output import console
    from gpuyard.client import Client

    Client().uncordon(node)
    console().print(f"node {node} is schedulable again")


def _jobs_column(jobs: list[int], hidden: int) -> str:
    """``3,4``, ``3,4 +2 others``: the jobs one may not see are counted (docs/security.md)."""
    shown = ",".join(map(str, jobs))
    others = f"+{hidden} other{'s' if hidden > 1 else ''}" if hidden else ""
    return " ".join(part for part in (shown, others) if part) or "-"


def remove_nodes(
    names: Annotated[list[str], typer.Argument(help="Gone nodes (see `gpuyard nodes`).")],
) -> None:
    """Forget nodes that are gone, such as those of an earlier virtual layout (admins). A node
    that is not gone, or that a job that has not ended holds, is refused with the reason; the
    others are removed all the same."""
    from rich.markup import escape

    from gpuyard.cli.output import console, err_console
    from gpuyard.client import Client
    from gpuyard.errors import GpuyardError

    client, failed = Client(), False
    for name in names:
        try:
            client.remove_node(name)
        except GpuyardError as exc:
            err_console().print(f"[red]error:[/] {escape(exc.detail)}", highlight=False)
            failed = True
        else:
            console().print(f"node {name} removed", markup=False)
    if failed:
        raise typer.Exit(1)
