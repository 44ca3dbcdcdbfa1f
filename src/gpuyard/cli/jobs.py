"""Job commands: submit, ls, show, logs, stop, suspend, resume, priority, rm, clone, events,
wait."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from rich.table import Table

    from gpuyard.client import Client
    from gpuyard.models import BulkResult, JobSpec, JobView, Prediction
    from gpuyard.models.faults import FaultEntry

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
    app.command()(suspend)
    app.command()(resume)
    app.command()(priority)
    app.command()(hold)
    app.command()(release)
    app.command()(runtime)
    app.command("rm")(rm)
    app.command()(clone)
    app.command()(events)
    app.command("ft-log")(ft_log)
    app.command()(wait)


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --.")] = None,
    file: Annotated[Path | None, typer.Option("-f", "--file", help="Job file (YAML).")] = None,
    name: Annotated[str | None, typer.Option(help="Job name.")] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="Distributed mode: single (the default), pytorch, pytorch-deepspeed, mpi, "
            "horovod, tensorflow or slurm (docs/distributed.md)."
        ),
    ] = None,
    nodes: Annotated[
        str | None, typer.Option(help="Number of nodes, or an elastic range MIN..MAX (2..4).")
    ] = None,
    exclusive: Annotated[
        bool | None,
        typer.Option(
            "--exclusive/--shared",
            help="Take each node whole, or only what it asks for (default: whole nodes for "
            "more than one node, a share of one).",
        ),
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs per node.")] = None,
    cpus: Annotated[float | None, typer.Option(help="CPUs per node.")] = None,
    memory: Annotated[str | None, typer.Option(help="Memory per node, e.g. 16G.")] = None,
    priority: Annotated[str | None, typer.Option(help="low, normal, high or highest.")] = None,
    access: Annotated[
        str | None,
        typer.Option(
            help="What your group's other members may do with it: read-write, read-only or "
            "none (the default)."
        ),
    ] = None,
    max_runtime: Annotated[
        str | None, typer.Option(help="Max runtime, e.g. 90s, 2h; then it expires.")
    ] = None,
    graceful_shutdown: Annotated[
        str | None, typer.Option(help="Seconds between SIGTERM and SIGKILL on stop.")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")
    ] = None,
    export: Annotated[
        str | None,
        typer.Option(
            "--export",
            help="What the job takes from this shell's environment (Slurm's --export): ALL "
            "(the default; in an image, NONE: the image's environment), NONE, or a list "
            "NAME,NAME=VALUE (after ALL or NONE, or alone: only those). --env wins.",
        ),
    ] = None,
    workdir: Annotated[
        str | None,
        typer.Option(
            help="Working directory (default: the current one; in an image, the image's)."
        ),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="Run in this image of the pool's registry (official/pytorch:2.13, "
            "alice/tools:v1, ...@sha256:...); see docs/images.md."
        ),
    ] = None,
    shm_size: Annotated[
        str | None,
        typer.Option(help="In an image: the size of /dev/shm (e.g. 8G; default: half the memory)."),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option("--task", help="A batch sub-task's command; repeatable (makes it a batch)."),
    ] = None,
    parameter_servers: Annotated[
        int | None, typer.Option(help="tensorflow: parameter servers (0: AllReduce).")
    ] = None,
    mpi: Annotated[str | None, typer.Option(help="mpi/horovod: openmpi or mpich.")] = None,
    launcher: Annotated[
        str | None,
        typer.Option(
            help="pytorch modes: torchrun (default; LOCAL_RANK in the environment) or legacy "
            "(torch.distributed.launch, which passes --local-rank)."
        ),
    ] = None,
    algorithm: Annotated[
        str | None, typer.Option(help="Code directory, at workspace/algorithm.")
    ] = None,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=PATH[:rw] at workspace/dataset/NAME, or a dataset of the catalogue, "
            "[OWNER/]NAME[@VERSION][:MOUNT] (read-only).",
        ),
    ] = None,
    prepare_data: Annotated[
        bool,
        typer.Option(
            "--prepare-data",
            help="Copy each --dataset of the catalogue to its nodes' fast storage before the "
            "command starts (verified; shown as a phase in the job's events).",
        ),
    ] = False,
    model: Annotated[
        list[str] | None, typer.Option(help="NAME=PATH at workspace/model/NAME (read-only).")
    ] = None,
    volume: Annotated[
        list[str] | None, typer.Option(help="NAME=PATH at workspace/volume/NAME (writable).")
    ] = None,
    outputs: Annotated[str | None, typer.Option(help="Where workspace/outputs points.")] = None,
    pool: Annotated[
        str | None, typer.Option(help="A dedicated pool to run in (see `gpuyard pools`).")
    ] = None,
    node: Annotated[
        list[str] | None,
        typer.Option("--node", help="Run only on this node; repeatable. Excludes --pool."),
    ] = None,
    driver: Annotated[
        str | None, typer.Option(help="Run only on nodes with this GPU driver version.")
    ] = None,
    exclude_node: Annotated[
        list[str] | None,
        typer.Option("--exclude-node", help="Never run on this node; repeatable."),
    ] = None,
    alternative: Annotated[
        list[str] | None,
        typer.Option(
            help="Another per-node spec to try when the first does not fit, e.g. "
            "gpus=4,cpus=8,memory=32G; repeatable, tried in order."
        ),
    ] = None,
    after: Annotated[
        list[str] | None,
        typer.Option(
            help="JOB[:WHEN]: wait for that job to succeed (or WHEN: started, ended, "
            "succeeded, failed); repeatable, all must hold."
        ),
    ] = None,
    hold: Annotated[
        bool, typer.Option("--hold", help="Submit it held (`gpuyard release` lets it start).")
    ] = False,
    max_restarts: Annotated[
        int | None,
        typer.Option(help="Fault tolerance: restarts after faults (turns it on; default 3)."),
    ] = None,
    recovery: Annotated[
        str | None,
        typer.Option(help="Fault tolerance: resume (from the last checkpoint) or restart."),
    ] = None,
    preflight: Annotated[
        bool | None,
        typer.Option("--preflight/--no-preflight", help="Fault tolerance: check every node first."),
    ] = None,
    retry_job_errors: Annotated[
        bool | None,
        typer.Option(
            "--retry-job-errors/--no-retry-job-errors",
            help="Fault tolerance: restart also after an error in the job's own code or data "
            "(an exception, a NaN loss, GPU out of memory), which is otherwise final.",
        ),
    ] = None,
    hang_timeout: Annotated[
        str | None,
        typer.Option(help="Fault tolerance: no progress and no log for this long is a hang."),
    ] = None,
    keep_failed: Annotated[
        str | None,
        typer.Option(
            help="Fault tolerance: when it fails for good, hold it this long (e.g. 30m) for "
            "`gpuyard exec` before it ends."
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print when it would start instead of submitting it."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job."""
    from gpuyard.cli.output import console, print_json
    from gpuyard.cli.specfile import (
        build_spec,
        command_text,
        exported_env,
        load_job_file,
        parse_after,
        parse_alternative,
        parse_dataset_flags,
        parse_env_flags,
        parse_mount_flags,
    )

    file_fields = load_job_file(file) if file else {}
    flags: dict[str, Any] = {
        "command": command_text(command) if command else None,
        "name": name,
        "mode": mode,
        "nodes": nodes,
        "exclusive": exclusive,
        "gpus": gpus,
        "cpus": cpus,
        "memory": memory,
        "priority": priority,
        "access": access,
        "max_runtime": max_runtime,
        "graceful_shutdown": graceful_shutdown,
        "env": parse_env_flags(env) if env else None,
        "workdir": workdir,
        "image": image,
        "shm_size": shm_size,
        "tasks": [{"command": t} for t in task] if task else None,
        "parameter_servers": parameter_servers,
        "mpi": mpi,
        "launcher": launcher,
        "algorithm": algorithm,
        "datasets": parse_dataset_flags(dataset, prepare=prepare_data) if dataset else None,
        "models": parse_mount_flags(model, flag="--model") if model else None,
        "volumes": parse_mount_flags(volume, flag="--volume") if volume else None,
        "outputs": outputs,
        "pool": pool,
        "node_names": node or None,
        "driver_version": driver,
        "exclude_nodes": exclude_node or None,
        "alternatives": [parse_alternative(a) for a in alternative] if alternative else None,
        "after": [parse_after(a) for a in after] if after else None,
        "hold": True if hold else None,
        "fault_tolerance": {
            k: v
            for k, v in (
                ("max_restarts", max_restarts),
                ("recovery", recovery),
                ("preflight", preflight),
                ("retry_job_errors", retry_job_errors),
                ("hang_timeout", hang_timeout),
                ("keep_failed", keep_failed),
            )
            if v is not None
        }
        or None,
    }
    in_image = image is not None or file_fields.get("image") is not None
    if workdir is None and "workdir" not in file_fields and not in_image:
        flags["workdir"] = os.getcwd()  # in an image, this machine's directory is not there
    if image is not None:
        file_fields["image"] = image  # for exported_env's default; the flag wins anyway
    exported = exported_env(file_fields, export, os.environ)
    spec = build_spec(file_fields, flags, exported=exported)
    if dry_run:
        prediction = _client().predict(spec)
        if as_json:
            print_json(prediction)
            return
        console().print(describe_prediction(prediction), highlight=False)
        if prediction.run_time:
            console().print(prediction.run_time, highlight=False)
        return
    job = _client().submit(spec)
    if as_json:
        print_json(job)
        return
    console().print(f"submitted job [bold]{job.id}[/] ({job.name}), {job.status.label}")


def describe_prediction(prediction: Prediction, now: datetime | None = None) -> str:
    """ "starts now", or "starts at about 14:05 (in 12m), behind jobs 3, 7"."""
    from datetime import UTC, datetime

    from gpuyard.quantities import format_duration

    if prediction.now:
        return "starts now"
    behind = ""
    if prediction.ahead:
        behind = ", behind jobs " + ", ".join(map(str, prediction.ahead))
    if prediction.start_at is None:
        return f"cannot say when it starts{behind}: {prediction.reason}"
    now = now or datetime.now(UTC)
    when = prediction.start_at.astimezone()
    shown = when.strftime("%H:%M" if when.date() == now.astimezone().date() else "%Y-%m-%d %H:%M")
    wait = format_duration(max(0.0, (prediction.start_at - now).total_seconds()))
    if prediction.earliest is not None and prediction.latest is not None:
        early, late = (
            format_duration(max(0.0, (t - now).total_seconds()))
            for t in (prediction.earliest, prediction.latest)
        )
        wait += f"; between {early} and {late}"
    return f"starts at about {shown} (in {wait}){behind}"


def ls(
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            "-s",
            help="Only jobs in this status: queued, running, succeeded, failed, stopped or "
            "expired; repeatable.",
        ),
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
    from rich.text import Text

    from gpuyard.cli.output import age, console, print_json, status_style
    from gpuyard.models.holding import gpus_text
    from gpuyard.terminal import scrubbed

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
    page = scrubbed(page)  # names and reasons are others' text: no escapes reach the terminal
    headers: tuple[str, ...] = ("ID", "NAME", "STATUS", "PRIO", "OWNER", "NODES", "GPUS", "AGE")
    rows: list[tuple[str, ...]] = [
        (
            str(job.id),
            job.name,
            job.status.label,
            job.spec.priority.value if job.spec else "?",
            job.owner,
            _nodes_text(job),
            gpus_text(
                job.spec.resources.gpus * job.spec.nodes if job.spec else None, job.held_gpus
            ),
            age(job.created_at),
            _image_text(job),
        )
        for job in page.items
    ]
    if any(row[-1] for row in rows):  # the column only where some job runs in an image
        headers += ("IMAGE",)
    else:
        rows = [row[:-1] for row in rows]
    out = console()
    # One line per job: the reason gets the width the other columns leave, cut short if it
    # must be (`gpuyard show` has all of it); the other columns are never squeezed.
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    room = max(10, out.width - sum(w + 2 for w in widths) - 2)
    table = Table(*headers, "REASON", box=None)
    for job, row in zip(page.items, rows, strict=True):
        reason = job.reason or ""
        if job.wait_code:
            reason = f"[{job.wait_code}] {reason}"
        if len(reason) > room:
            reason = reason[: room - 1] + "…"
        # Status is styled; the reason is text, not markup ("[quota] …" is no style tag).
        table.add_row(*row[:2], status_style(job.status.value), *row[3:], Text(reason))
    out.print(table)
    shown = f"{offset + 1}-{offset + len(page.items)}" if page.items else "0"
    out.print(f"[dim]{shown} of {page.total}[/]")


def _image_text(job: JobView) -> str:
    """The job's image for a listing (``show`` prints its pinned digest)."""
    from gpuyard.models.image import ImageRef

    if job.spec is None or job.spec.image is None:
        return ""
    return ImageRef.parse(job.spec.image).short


def show(job_id: int, as_json: JsonOpt = False) -> None:
    """Show one job."""
    from gpuyard.cli.output import print_json
    from gpuyard.terminal import scrubbed

    job = _client().job(job_id)
    if as_json:
        print_json(job)
        return
    _print_job(scrubbed(job))  # name, command, env, reason: the owner's text, not escapes


def _status_text(job: JobView) -> str:
    """The status, and the finer state when it says more (``running (stopping)``, not
    ``succeeded (succeeded)``)."""
    from gpuyard.cli.output import status_style

    shown = status_style(job.status.value)
    return shown if job.state.value == job.status.value else f"{shown} ({job.state.value})"


def _print_job(job: JobView) -> None:
    from rich.table import Table
    from rich.text import Text

    from gpuyard.cli.output import console
    from gpuyard.quantities import format_resources

    def per_node(gpus: int, cpus: float, memory: int) -> str:
        return format_resources(gpus, cpus, memory)

    rows: list[tuple[str, str | Text]] = [
        ("id", str(job.id)),
        ("name", Text(job.name)),
        ("owner", Text(f"{job.owner} (group {job.group or '-'})")),
        ("status", _status_text(job)),
    ]
    if job.status.value == "queued":
        rows += [
            ("waiting because", Text(job.reason or "-")),
            ("wait code", job.wait_code or "-"),
            ("expected start", _expected_start(job)),
        ]
    else:
        rows.append(("reason", Text(job.reason or "")))
    spec = job.spec
    if spec is None:
        rows.append(("spec", Text(job.spec_error or "unreadable")))
    else:
        rows += _spec_rows(spec, per_node)
    if job.held_gpus is not None:
        rows.append(("GPUs held", _held_text(job)))
    rows += [
        ("attempt", str(job.attempt)),
        ("created", job.created_at.isoformat(timespec="seconds")),
        ("started", job.started_at.isoformat(timespec="seconds") if job.started_at else "-"),
        ("finished", job.finished_at.isoformat(timespec="seconds") if job.finished_at else "-"),
        ("exit code", "-" if job.exit_code is None else str(job.exit_code)),
    ]
    if job.suspensions:
        rows.append(("suspensions", str(job.suspensions)))
    if job.held_until is not None:
        rows.append(("held until", job.held_until.astimezone().isoformat(timespec="seconds")))
    if spec is not None and spec.env:
        rows.append(("env", Text(" ".join(f"{k}={v}" for k, v in spec.env.items()))))
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
            if slot and slot.exclusive:
                gpus += " (whole node)"
            workers.add_row(
                str(w.rank), w.node, gpus, w.state, "-" if w.exit_code is None else str(w.exit_code)
            )
        out.print(workers)


def _spec_rows(spec: JobSpec, per_node: Callable[[int, float, int], str]) -> list[Any]:
    from rich.text import Text

    from gpuyard.quantities import format_duration

    r = spec.resources
    nodes = f"{spec.min_nodes}..{spec.nodes} (elastic)" if spec.elastic else str(spec.nodes)
    rows: list[tuple[str, str | Text]] = [
        ("command", Text(spec.command or "; ".join(spec.commands()))),
        ("mode", spec.mode.value),
        ("nodes", nodes),
        ("per node", per_node(r.gpus, r.cpus, r.memory)),
    ]
    for i, alt in enumerate(spec.alternatives, 1):
        rows.append((f"or per node ({i})", per_node(alt.gpus, alt.cpus, alt.memory)))
    rows.append(("priority", spec.priority.value))
    if spec.pool:
        rows.append(("pool", Text(spec.pool)))
    if spec.node_names:
        rows.append(("only nodes", Text(", ".join(spec.node_names))))
    if spec.driver_version:
        rows.append(("driver", Text(spec.driver_version)))
    rows += [
        ("max runtime", format_duration(spec.max_runtime) if spec.max_runtime else "none"),
        ("graceful shutdown", format_duration(spec.graceful_shutdown)),
        ("workdir", Text(spec.workdir or "(job directory)")),
    ]
    if spec.image:
        rows.append(("image", Text(spec.image)))
    return rows


def _held_text(job: JobView) -> str:
    """``8 (whole nodes: 2 x 4)``: what the placement holds, and why more than asked for."""
    whole = [s for s in job.placement if s.exclusive]
    if not whole:
        return str(job.held_gpus)
    per_node = sorted({s.held_gpus for s in whole if s.held_gpus is not None})
    each = f" x {per_node[0]}" if len(per_node) == 1 else ""
    return f"{job.held_gpus} (whole nodes: {len(whole)}{each})"


def _nodes_text(job: JobView) -> str:
    """``4``, or an elastic job's ``2..4``."""
    spec = job.spec
    if spec is None:
        return "?"
    return f"{spec.min_nodes}..{spec.nodes}" if spec.elastic else str(spec.nodes)


def _expected_start(job: JobView) -> str:
    from datetime import UTC, datetime

    from gpuyard.quantities import format_duration

    if job.start_at is None:
        return "unknown (no reservation holds room for it yet)"
    wait = max(0.0, (job.start_at - datetime.now(UTC)).total_seconds())
    when = job.start_at.astimezone().isoformat(timespec="seconds")
    return f"about {when} (in {format_duration(wait)})"


def logs(
    job_id: int,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Stream until it ends.")] = False,
    worker: Annotated[int, typer.Option("--worker", "-w", help="Worker rank.")] = 0,
    attempt: Annotated[int | None, typer.Option(help="Attempt (default: latest).")] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="The log's bytes as written, terminal escape sequences included (for a file; "
            "by default they are removed, since a log is the job's text).",
        ),
    ] = False,
) -> None:
    """Print a worker's log (without terminal escape sequences unless --raw)."""
    from gpuyard.terminal import StreamFilter

    client = _client()
    out = sys.stdout.buffer
    clean = None if raw else StreamFilter()

    def write(data: bytes, *, final: bool = False) -> None:
        out.write(data if clean is None else clean.feed(data, final=final).encode())

    if follow:
        for data in client.follow_logs(job_id, worker=worker, attempt=attempt):
            write(data)
            out.flush()
        write(b"", final=True)
        out.flush()
        return
    offset = 0
    while True:
        chunk = client.logs(job_id, worker=worker, attempt=attempt, offset=offset, limit=1 << 20)
        write(chunk.data.encode())
        offset = chunk.next_offset
        if offset >= chunk.size or chunk.next_offset == chunk.offset:
            break
    write(b"", final=True)
    out.flush()


def stop(job_ids: Annotated[list[int], typer.Argument(help="Job ids.")]) -> None:
    """Stop jobs: queued ones at once, running ones with SIGTERM then SIGKILL."""
    from gpuyard.cli.output import console

    result = _client().stop_many(job_ids)
    for job_id in result.done:
        console().print(f"job {job_id}: {result.states[job_id].value}")
    _report_failures(result)


def suspend(
    job_ids: Annotated[list[int], typer.Argument(help="Job ids.")],
    hold: Annotated[
        bool,
        typer.Option(
            "--hold",
            help="Keep them held once suspended: they are not placed again until "
            "`gpuyard resume` (a pause).",
        ),
    ] = False,
) -> None:
    """Suspend running jobs: they checkpoint and wait in the queue at their place.

    They resume later from their checkpoint, as their next attempt: at once if there is room,
    or, with --hold, once `gpuyard resume` releases them."""
    from gpuyard.cli.output import console

    client = _client()
    for job_id in job_ids:
        job = client.suspend(job_id, hold=hold)
        console().print(f"job {job.id}: {job.state.value}{', held' if job.on_hold else ''}")


def resume(
    job_ids: Annotated[list[int], typer.Argument(help="Job ids.")],
    from_step: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Resume one job from this complete checkpoint step, or 'latest' "
            "(`gpuyard checkpoints JOB` lists them; docs/checkpoints.md).",
        ),
    ] = None,
) -> None:
    """Release held jobs (suspended with --hold, or held): they queue again at their place and
    resume from their checkpoint when their turn comes."""
    from gpuyard.cli.output import console

    if from_step is not None:
        _resume_from(job_ids, from_step)
        return
    result = _client().hold_many(job_ids, held=False)
    for job_id in result.done:
        console().print(f"job {job_id}: released, {result.states[job_id].value}")
    _report_failures(result)


def _resume_from(job_ids: list[int], text: str) -> None:
    from gpuyard.cli.checkpoints import parse_step
    from gpuyard.cli.output import console

    if len(job_ids) != 1:
        raise typer.BadParameter("--from names a step of one job: give one job id")
    step = parse_step(text)
    listing = _client().resume_from(job_ids[0], step)
    chosen = "the newest step" if step is None else f"step {step}"
    console().print(f"job {listing.job_id}: its next attempt resumes from {chosen}")


def priority(
    job_id: Annotated[int, typer.Argument(help="A queued or suspended job.")],
    tier: Annotated[str, typer.Argument(help="low, normal, high or highest.")],
    as_json: JsonOpt = False,
) -> None:
    """Change a queued or suspended job's priority (its owner or an admin)."""
    from gpuyard.cli.output import console, print_json

    job = _client().change_priority(job_id, tier.strip().lower())
    if as_json:
        print_json(job)
        return
    priority = job.spec.priority.value if job.spec else "?"
    console().print(f"job {job.id}: priority {priority}, {job.status.label}")


def hold(
    job_id: Annotated[int, typer.Argument(help="A queued, suspending or suspended job.")],
    as_json: JsonOpt = False,
) -> None:
    """Keep a waiting job from starting until `gpuyard release` (a running one: `gpuyard
    suspend --hold`)."""
    _held(job_id, as_json, held=True)


def release(
    job_id: Annotated[int, typer.Argument(help="A held job.")],
    as_json: JsonOpt = False,
) -> None:
    """Let a held job start when its turn comes."""
    _held(job_id, as_json, held=False)


def _held(job_id: int, as_json: bool, *, held: bool) -> None:
    from gpuyard.cli.output import console, print_json

    client = _client()
    job = client.hold(job_id) if held else client.release(job_id)
    if as_json:
        print_json(job)
        return
    console().print(f"job {job.id}: {'held' if job.on_hold else 'released'}, {job.status.label}")


def runtime(
    job_id: Annotated[int, typer.Argument(help="A job that has not ended.")],
    limit: Annotated[str, typer.Argument(help="The new max runtime, e.g. 90m, 2h, 1d.")],
    as_json: JsonOpt = False,
) -> None:
    """Change a job's max runtime, counted from its start (its owner, an admin, or its group
    with read-write access)."""
    from gpuyard.cli.output import console, print_json
    from gpuyard.quantities import format_duration

    job = _client().change_runtime(job_id, limit)
    if as_json:
        print_json(job)
        return
    limit_s = job.spec.max_runtime if job.spec else None
    shown = format_duration(limit_s) if limit_s else "none"
    console().print(f"job {job.id}: max runtime {shown}, {job.status.label}")


def rm(job_ids: Annotated[list[int], typer.Argument(help="Job ids.")]) -> None:
    """Delete ended jobs with their logs."""
    from gpuyard.cli.output import console

    result = _client().delete_many(job_ids)
    for job_id in result.done:
        console().print(f"job {job_id}: deleted")
    _report_failures(result)


def _report_failures(result: BulkResult) -> None:
    """Each job a bulk request left alone, with why; exit 1 if there is any."""
    from gpuyard.cli.output import err_console

    for failure in result.failed:
        err_console().print(f"job {failure.id}: {failure.detail}", markup=False)
    if result.failed:
        raise typer.Exit(1)


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
    from gpuyard.terminal import scrubbed

    items = _client().events(job_id)
    if as_json:
        print_json(items)
        return
    items = scrubbed(items)
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


def ft_log(job_id: int, as_json: JsonOpt = False) -> None:
    """Show a job's fault-tolerance log: each fault, its evidence, the action, the outcome;
    and each `gpuyard exec` action (usercall): who, the command, what came of it."""
    from gpuyard.cli.output import console, print_json
    from gpuyard.terminal import scrubbed

    items = _client().faults(job_id)
    if as_json:
        print_json(items)
        return
    items = scrubbed(items)
    if not items:
        console().print(f"job {job_id} has had no fault")
        return
    console().print(fault_table(items))


def fault_table(items: list[FaultEntry]) -> Table:
    """The ft-log table. Long words (``fault_tolerance.retry_job_errors`` in a hint) fold
    onto the next line instead of ending in an ellipsis, so a hint is whole at any width."""
    from rich.table import Table
    from rich.text import Text

    def cell(text: str) -> Text:
        return Text(text, overflow="fold")

    table = Table("TIME", "ATTEMPT", "KIND", "CAUSE", "WHERE", "EVIDENCE", "ACTION", "OUTCOME")
    for column in table.columns:
        column.overflow = "fold"
    for f in items:
        where = " on ".join(
            part for part in (f"rank {f.rank}" if f.rank is not None else "", f.node or "") if part
        )
        # A usercall's cause is the command a person ran; who ran it stands where a fault's
        # suspect does. Logs and commands are text, never markup.
        who = f.actor if f.kind == "usercall" and f.actor else f.suspect
        table.add_row(
            f.time.astimezone().strftime("%H:%M:%S"),
            str(f.attempt),
            f.kind,
            cell(f"{f.cause} [{who}]"),
            cell(where or "-"),
            cell(f.evidence),
            cell(f.action),
            cell(f.outcome or "(under way)"),
        )
    return table


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
