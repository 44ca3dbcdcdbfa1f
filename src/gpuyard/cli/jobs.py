"""Job commands: submit, ls, show, logs, stop, rm, clone, events."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuyard.client import Client
    from gpuyard.models import JobView

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _client() -> Client:
    from gpuyard.client import Client

    return Client()


def register(app: typer.Typer) -> None:
    app.command(
        context_settings={"allow_interspersed_args": False},
        help="Submit a job: gpuyard submit [OPTIONS] -- COMMAND [ARGS]...",
    )(submit)
    app.command("ls")(ls)
    app.command()(show)
    app.command()(logs)
    app.command()(stop)
    app.command("rm")(rm)
    app.command()(clone)
    app.command()(events)
    app.command()(wait)


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --.")] = None,
    file: Annotated[Path | None, typer.Option("-f", "--file", help="Job file (YAML).")] = None,
    name: Annotated[str | None, typer.Option(help="Job name.")] = None,
    mode: Annotated[str | None, typer.Option(help="Distributed mode: single.")] = None,
    nodes: Annotated[int | None, typer.Option(help="Number of nodes.")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs per node.")] = None,
    cpus: Annotated[float | None, typer.Option(help="CPUs per node.")] = None,
    memory: Annotated[str | None, typer.Option(help="Memory per node, e.g. 16G.")] = None,
    priority: Annotated[str | None, typer.Option(help="low, normal, high or highest.")] = None,
    max_runtime: Annotated[
        str | None, typer.Option(help="Max runtime, e.g. 90s, 2h; then it expires.")
    ] = None,
    graceful_shutdown: Annotated[
        str | None, typer.Option(help="Seconds between SIGTERM and SIGKILL on stop.")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")
    ] = None,
    workdir: Annotated[
        str | None, typer.Option(help="Working directory (default: the current one).")
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option("--task", help="A batch sub-task's command; repeatable (makes it a batch)."),
    ] = None,
    parameter_servers: Annotated[
        int | None, typer.Option(help="tensorflow: parameter servers (0: AllReduce).")
    ] = None,
    mpi: Annotated[str | None, typer.Option(help="mpi/horovod: openmpi or mpich.")] = None,
    algorithm: Annotated[
        str | None, typer.Option(help="Code directory, at workspace/algorithm.")
    ] = None,
    dataset: Annotated[
        list[str] | None, typer.Option(help="NAME=PATH[:rw] at workspace/dataset/NAME.")
    ] = None,
    model: Annotated[
        list[str] | None, typer.Option(help="NAME=PATH at workspace/model/NAME (read-only).")
    ] = None,
    volume: Annotated[
        list[str] | None, typer.Option(help="NAME=PATH at workspace/volume/NAME (writable).")
    ] = None,
    outputs: Annotated[str | None, typer.Option(help="Where workspace/outputs points.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job."""
    from gpuyard.cli.output import console, print_json
    from gpuyard.cli.specfile import (
        build_spec,
        command_text,
        load_job_file,
        parse_env_flags,
        parse_mount_flags,
    )

    file_fields = load_job_file(file) if file else {}
    flags: dict[str, Any] = {
        "command": command_text(command) if command else None,
        "name": name,
        "mode": mode,
        "nodes": nodes,
        "gpus": gpus,
        "cpus": cpus,
        "memory": memory,
        "priority": priority,
        "max_runtime": max_runtime,
        "graceful_shutdown": graceful_shutdown,
        "env": parse_env_flags(env) if env else None,
        "workdir": workdir,
        "tasks": [{"command": t} for t in task] if task else None,
        "parameter_servers": parameter_servers,
        "mpi": mpi,
        "algorithm": algorithm,
        "datasets": parse_mount_flags(dataset, flag="--dataset") if dataset else None,
        "models": parse_mount_flags(model, flag="--model") if model else None,
        "volumes": parse_mount_flags(volume, flag="--volume") if volume else None,
        "outputs": outputs,
    }
    if workdir is None and "workdir" not in file_fields:
        flags["workdir"] = os.getcwd()
    job = _client().submit(build_spec(file_fields, flags))
    if as_json:
        print_json(job)
        return
    console().print(f"submitted job [bold]{job.id}[/] ({job.name}), {job.status.label}")


def ls(
    status: Annotated[
        list[str] | None, typer.Option("--status", "-s", help="Filter, repeatable.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Name contains.")] = None,
    owner: Annotated[str | None, typer.Option(help="Owner.")] = None,
    mine: Annotated[bool, typer.Option("--mine", help="Only my jobs.")] = False,
    limit: Annotated[int, typer.Option(help="Page size.")] = 50,
    offset: Annotated[int, typer.Option(help="Skip this many.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """List jobs, newest first."""
    from rich.table import Table

    from gpuyard.cli.output import age, console, print_json, status_style

    client = _client()
    page = client.jobs(
        status=status or [],
        name=name,
        owner=client.user if mine else owner,
        offset=offset,
        limit=limit,
    )
    if as_json:
        print_json(page)
        return
    table = Table("ID", "NAME", "STATUS", "OWNER", "NODES", "GPUS", "AGE", "REASON", box=None)
    for job in page.items:
        table.add_row(
            str(job.id),
            job.name,
            status_style(job.status.value),
            job.owner,
            str(job.spec.nodes),
            str(job.spec.resources.gpus * job.spec.nodes),
            age(job.created_at),
            (job.reason or "")[:60],
        )
    out = console()
    out.print(table)
    shown = f"{offset + 1}-{offset + len(page.items)}" if page.items else "0"
    out.print(f"[dim]{shown} of {page.total}[/]")


def show(job_id: int, as_json: JsonOpt = False) -> None:
    """Show one job."""
    from gpuyard.cli.output import print_json

    job = _client().job(job_id)
    if as_json:
        print_json(job)
        return
    _print_job(job)


def _print_job(job: JobView) -> None:
    from rich.table import Table

    from gpuyard.cli.output import console, status_style
    from gpuyard.quantities import format_bytes, format_duration

    spec = job.spec
    r = spec.resources
    rows = [
        ("id", str(job.id)),
        ("name", job.name),
        ("owner", job.owner),
        ("status", f"{status_style(job.status.value)} ({job.state.value})"),
        ("reason", job.reason or ""),
        ("command", spec.command),
        ("mode", spec.mode.value),
        ("nodes", str(spec.nodes)),
        ("per node", f"{r.gpus} GPUs, {r.cpus:g} CPUs, {format_bytes(r.memory)} memory"),
        ("priority", spec.priority.value),
        ("max runtime", format_duration(spec.max_runtime) if spec.max_runtime else "none"),
        ("graceful shutdown", format_duration(spec.graceful_shutdown)),
        ("workdir", spec.workdir or "(job directory)"),
        ("attempt", str(job.attempt)),
        ("created", job.created_at.isoformat(timespec="seconds")),
        ("started", job.started_at.isoformat(timespec="seconds") if job.started_at else "-"),
        ("finished", job.finished_at.isoformat(timespec="seconds") if job.finished_at else "-"),
        ("exit code", "-" if job.exit_code is None else str(job.exit_code)),
    ]
    if spec.env:
        rows.append(("env", " ".join(f"{k}={v}" for k, v in spec.env.items())))
    table = Table(box=None, show_header=False)
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", value)
    out = console()
    out.print(table)
    if job.workers:
        workers = Table("WORKER", "NODE", "GPUS", "STATE", "EXIT", box=None)
        slots = dict(enumerate(job.placement))
        for w in job.workers:
            slot = slots.get(w.rank)
            gpus = ",".join(map(str, slot.gpus)) if slot and slot.gpus else "-"
            workers.add_row(
                str(w.rank), w.node, gpus, w.state, "-" if w.exit_code is None else str(w.exit_code)
            )
        out.print(workers)


def logs(
    job_id: int,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Stream until it ends.")] = False,
    worker: Annotated[int, typer.Option("--worker", "-w", help="Worker rank.")] = 0,
    attempt: Annotated[int | None, typer.Option(help="Attempt (default: latest).")] = None,
) -> None:
    """Print a worker's log."""
    client = _client()
    out = sys.stdout.buffer
    if follow:
        for data in client.follow_logs(job_id, worker=worker, attempt=attempt):
            out.write(data)
            out.flush()
        return
    offset = 0
    while True:
        chunk = client.logs(job_id, worker=worker, attempt=attempt, offset=offset, limit=1 << 20)
        out.write(chunk.data.encode())
        offset = chunk.next_offset
        if offset >= chunk.size or chunk.next_offset == chunk.offset:
            break
    out.flush()


def stop(job_ids: Annotated[list[int], typer.Argument(help="Job ids.")]) -> None:
    """Stop jobs: queued ones at once, running ones with SIGTERM then SIGKILL."""
    from gpuyard.cli.output import console

    client = _client()
    for job_id in job_ids:
        job = client.stop(job_id)
        console().print(f"job {job.id}: {job.state.value}")


def rm(job_ids: Annotated[list[int], typer.Argument(help="Job ids.")]) -> None:
    """Delete ended jobs with their logs."""
    from gpuyard.cli.output import console

    client = _client()
    for job_id in job_ids:
        client.delete(job_id)
        console().print(f"job {job_id}: deleted")


def clone(
    job_id: int,
    name: Annotated[str | None, typer.Option(help="Name of the copy.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a copy of a job."""
    from gpuyard.cli.output import console, print_json

    overrides = {"name": name} if name else {}
    job = _client().clone(job_id, **overrides)
    if as_json:
        print_json(job)
        return
    console().print(f"submitted job [bold]{job.id}[/] ({job.name}), a copy of job {job_id}")


def events(job_id: int, as_json: JsonOpt = False) -> None:
    """Show a job's event log."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    items = _client().events(job_id)
    if as_json:
        print_json(items)
        return
    table = Table("TIME", "EVENT", "ACTOR", "NODE", "DETAIL", box=None)
    for e in items:
        what = f"{e.from_state or ''} -> {e.to_state}" if e.to_state else e.kind
        table.add_row(
            e.time.astimezone().strftime("%H:%M:%S.%f")[:-3],
            what,
            e.actor,
            e.node or "",
            e.reason,
        )
    console().print(table)


def wait(
    job_id: int,
    timeout: Annotated[float | None, typer.Option(help="Give up after seconds.")] = None,
) -> None:
    """Wait until a job ends; exit 0 if it succeeded, 1 otherwise."""
    from gpuyard.cli.output import console, status_style

    job = _client().wait(job_id, timeout=timeout)
    console().print(
        f"job {job.id}: {status_style(job.status.value)}"
        + (f" ({job.reason})" if job.reason else "")
    )
    if job.status.value != "succeeded":
        raise typer.Exit(1)
