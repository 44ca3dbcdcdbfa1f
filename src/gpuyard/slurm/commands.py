"""The Slurm-compatible commands a user runs: ``sbatch salloc squeue sacct scancel sinfo scontrol``.

``gpuyard slurm-shims DIR`` writes one small script per command into DIR; each runs
``python -m gpuyard.slurm COMMAND ...``, which lands in :func:`main`. They talk to the pool over
its API with the user's credentials, like the ``gpuyard`` CLI, and print what Slurm 22.05 prints
(``gpuyard.slurm.render``). ``srun`` and the in-job ``scontrol`` are the job's own
(``executors/slurmstep.py``): they need no server.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TextIO, cast

from gpuyard.client import Client
from gpuyard.errors import GpuyardError as ClientError
from gpuyard.models import After, JobState, JobView
from gpuyard.models.slurm import SlurmStepView
from gpuyard.slurm.options import OptionError
from gpuyard.slurm.records import JobRecord, StepRecord
from gpuyard.spec_limits import MAX_SCRIPT, signal_number
from gpuyard.terminal import PrintableWriter, printable

__all__ = ["COMMANDS", "main"]

SLURM_VERSION = "slurm-wlm 22.05.8"


class CommandError(Exception):
    """Printed as ``<command>: error: <message>`` (or as given, ``raw``); exits ``status``."""

    def __init__(self, message: str, *, status: int = 1, raw: bool = False) -> None:
        super().__init__(message)
        self.status, self.raw = status, raw


class BadJobId(CommandError):
    """A job id that is not one (``abc``, ``12_x``): each command words it as Slurm does."""

    def __init__(self, text: str) -> None:
        super().__init__(f"Invalid job id {text}")
        self.text = text


def _client() -> Client:
    return Client()


# --- jobs as Slurm sees them -----------------------------------------------------------

_STATE = {
    JobState.QUEUED: "PENDING",
    JobState.SUSPENDED: "PENDING",
    JobState.STARTING: "RUNNING",
    JobState.RUNNING: "RUNNING",
    JobState.STOPPING: "COMPLETING",
    JobState.EXPIRING: "COMPLETING",
    JobState.FAILING: "COMPLETING",
    JobState.COMPLETING: "COMPLETING",
    JobState.SUSPENDING: "COMPLETING",
    JobState.RECOVERING: "COMPLETING",
    # Held for debugging: its allocation kept, its processes stopped, as a Slurm job that
    # `scontrol suspend` stopped (squeue's S); it runs again on `gpuyard exec JOB start`.
    JobState.HALTING: "SUSPENDED",
    JobState.HELD: "SUSPENDED",
    JobState.RESTARTING: "RUNNING",
    JobState.SUCCEEDED: "COMPLETED",
    JobState.FAILED: "FAILED",
    JobState.STOPPED: "CANCELLED",
    JobState.EXPIRED: "TIMEOUT",
}


_SLURM_AFTER = {
    After.STARTED: "after",
    After.ENDED: "afterany",
    After.SUCCEEDED: "afterok",
    After.FAILED: "afternotok",
}


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _srun_step(
    step: SlurmStepView, job_state: str, cpus_per_task: int, job_end: float | None
) -> StepRecord:
    """An ``srun`` step as sacct shows it: COMPLETED, FAILED with its code, CANCELLED with the
    signal that ended it; RUNNING while it runs, CANCELLED if its job ended first."""
    code, signal, end = step.exit_code, 0, step.end
    if code is None:
        running = job_state in ("RUNNING", "COMPLETING")
        state = "RUNNING" if running else "CANCELLED"
        if not running:
            end = job_end
            signal = 15 if job_state in ("CANCELLED", "TIMEOUT") else 9
        code = 0
    elif code > 128:
        state, signal, code = "CANCELLED", code - 128, 0
    else:
        state = "COMPLETED" if code == 0 else "FAILED"
    return StepRecord(
        name=str(step.id),
        state=state,
        nodes=tuple(step.nodes),
        exit_code=code,
        signal=signal,
        start=step.start,
        end=end,
        tasks=step.tasks,
        cpus=step.tasks * cpus_per_task,
        job_name=step.name,
    )


def job_record(job: JobView, uid: int = 0, srun_steps: Sequence[SlurmStepView] = ()) -> JobRecord:
    spec = job.spec
    slurm = spec.slurm if spec is not None else None
    nodes = tuple(dict.fromkeys(slot.node for slot in job.placement)) or tuple(
        dict.fromkeys(w.node for w in job.workers if w.attempt == job.attempt)
    )
    state = _STATE[job.state]
    if job.state is JobState.SUSPENDED:
        state = "PENDING"
    exit_code = job.exit_code or 0
    signal = 0
    if exit_code > 128 and state in ("FAILED", "CANCELLED", "TIMEOUT"):
        signal, exit_code = exit_code - 128, 0
    array_id = array_task = None
    throttle = 0
    if slurm is not None and slurm.array is not None:
        array_id = slurm.array.job_id or job.id
        array_task = str(slurm.array.task_id)
        throttle = slurm.array.throttle or 0
    reason = "None"
    if state == "PENDING":
        reason = "BeginTime" if job.state is JobState.SUSPENDED else "Priority"
        if job.wait_code == "held":
            reason = "JobHeldUser"
        elif job.wait_code == "dependency":
            never = (job.reason or "").startswith("can never")
            reason = "DependencyNeverSatisfied" if never else "Dependency"
        elif job.wait_code == "begin":
            reason = "BeginTime"
        elif job.wait_code == "array-limit":
            reason = "JobArrayTaskLimit"
        elif job.wait_code:
            reason = "Resources" if "resource" in job.wait_code else "Priority"
    start, end = _ts(job.started_at), _ts(job.finished_at)
    steps: list[StepRecord] = []
    if slurm is not None and start is not None and nodes:
        step_state = state if state != "COMPLETING" else "RUNNING"
        steps.append(
            StepRecord(
                name="batch",
                state="CANCELLED" if state == "CANCELLED" else step_state,
                nodes=nodes[:1],
                exit_code=exit_code,
                signal=signal,
                start=start,
                end=end,
                cpus=int(spec.resources.cpus) if spec is not None else 1,
            )
        )
        # What a Slurm with PrologFlags=Contain (the recorded reference) shows for every job:
        # the step that holds the allocation on each node, ended COMPLETED however the job did.
        steps.append(
            StepRecord(
                name="extern",
                state="RUNNING" if state in ("RUNNING", "COMPLETING") else "COMPLETED",
                nodes=nodes,
                start=start,
                end=end,
                tasks=len(nodes),
                cpus=int((spec.resources.cpus if spec else 1) * (spec.nodes if spec else 1)),
                job_name="extern",
            )
        )
        cpus_per_task = (slurm.cpus_per_task or 1) if slurm is not None else 1
        steps.extend(_srun_step(s, state, cpus_per_task, end) for s in srun_steps)
    return JobRecord(
        job_id=job.id,
        name=slurm.job_name if slurm is not None else job.name,
        user=job.owner,
        uid=slurm.uid if slurm is not None else uid,
        state=state,
        partition=(slurm.partition if slurm is not None else (spec.pool if spec else ""))
        or "default",
        account=(slurm.account if slurm is not None and slurm.account else job.group),
        group=job.group,
        gid=slurm.gid if slurm is not None else 0,
        array_job_id=array_id,
        array_task=array_task,
        array_throttle=throttle,
        cancelled_by=(slurm.uid if slurm is not None else uid) if state == "CANCELLED" else None,
        reason=reason,
        exit_code=exit_code,
        signal=signal,
        nodes=nodes,
        num_nodes=spec.nodes if spec is not None else max(1, len(nodes)),
        num_cpus=int((spec.resources.cpus if spec else 1) * (spec.nodes if spec else 1)),
        num_tasks=slurm.ntasks if slurm is not None else (spec.nodes if spec else 1),
        cpus_per_task=(slurm.cpus_per_task or 1) if slurm is not None else 1,
        gpus_per_node=spec.resources.gpus if spec is not None else 0,
        memory_mb=(spec.resources.memory >> 20)
        if spec is not None and spec.resources.memory
        else 0,
        submit=job.created_at.timestamp(),
        eligible=max(
            job.created_at.timestamp(), (slurm.begin or 0.0) if slurm is not None else 0.0
        ),
        start=start,
        end=end,
        time_limit=spec.max_runtime if spec is not None else None,
        priority={"low": 1, "normal": 2, "high": 3, "highest": 4}.get(
            spec.priority.value if spec else "normal", 2
        ),
        qos=(slurm.qos if slurm is not None else (spec.priority.value if spec else "normal")),
        restarts=job.attempt,
        work_dir=slurm.work_dir if slurm is not None else ((spec.workdir if spec else None) or ""),
        command=(spec.command if spec is not None else None) or "",
        stdout=slurm.output if slurm is not None else "",
        stderr=(slurm.error or slurm.output) if slurm is not None else "",
        dependency=",".join(
            f"{_SLURM_AFTER[d.when]}:{d.job}" for d in (spec.after if spec is not None else ())
        ),
        comment=slurm.comment if slurm is not None else "",
        requeue=slurm.requeue if slurm is not None else True,
        steps=tuple(steps),
    )


def job_records(
    job: JobView, uid: int = 0, srun_steps: Sequence[SlurmStepView] = ()
) -> list[JobRecord]:
    """What Slurm shows of a job: one record, or one per component of a heterogeneous job
    (``L+0``, ``L+1``, ... whose own ids are L, L+1, ...). The components share the job's state
    and exit code; each has its own name, nodes, sizes and ``extern`` step, the first also the
    ``batch`` step, and each step row shows under the components whose nodes it ran on."""
    record = job_record(job, uid, srun_steps)
    slurm = job.spec.slurm if job.spec is not None else None
    if slurm is None or not slurm.het:
        return [record]
    last = job.id + len(slurm.het) - 1
    nodes = list(record.nodes)
    out, first = [], 0
    for offset, component in enumerate(slurm.het):
        mine = tuple(nodes[first : first + component.nodes])
        first += component.nodes
        cpus = int(component.cpus * component.nodes)
        steps = []
        for step in record.steps:
            if step.name == "batch" and offset > 0:
                continue
            on = tuple(n for n in step.nodes if n in mine) if step.name != "batch" else mine[:1]
            if not on and step.name not in ("batch", "extern"):
                continue
            steps.append(dataclasses.replace(step, nodes=on or mine, cpus=cpus))
        out.append(
            dataclasses.replace(
                record,
                job_id=job.id + offset,
                het_job_id=job.id,
                het_job_offset=offset,
                het_job_id_set=f"{job.id}-{last}",
                name=component.job_name,
                nodes=mine,
                num_nodes=component.nodes,
                num_cpus=cpus,
                num_tasks=component.ntasks,
                cpus_per_task=component.cpus_per_task or 1,
                gpus_per_node=component.gpus,
                memory_mb=component.memory >> 20,
                steps=tuple(steps),
            )
        )
    return out


def _parse_ids(texts: Sequence[str]) -> list[tuple[int, int | None]]:
    """``17``, ``17_3``, ``17_[1-3]`` (as bare array ids) → (job or array id, task or None)."""
    out: list[tuple[int, int | None]] = []
    for text in texts:
        for raw in text.split(","):
            part = raw.strip()
            if not part:
                continue
            head, _, task = part.partition("_")
            head = head.split(".")[0].split("+")[0]
            if not head.isdigit():
                raise BadJobId(part)
            if task and task.isdigit():
                out.append((int(head), int(task)))
            else:
                out.append((int(head), None))
    return out


def het_components(texts: Sequence[str]) -> dict[int, set[int]]:
    """The components that ids of the form ``L+k`` name (``sacct -j 516+1``), per job."""
    out: dict[int, set[int]] = {}
    for text in texts:
        for raw in text.split(","):
            head, plus, offset = raw.strip().split(".")[0].partition("+")
            if plus and head.isdigit() and offset.isdigit():
                out.setdefault(int(head), set()).add(int(offset))
    return out


def only_components(records: list[JobRecord], wanted: dict[int, set[int]]) -> list[JobRecord]:
    """``records`` less the components of the jobs in ``wanted`` that it does not name."""
    return [
        r for r in records if r.het_job_id not in wanted or r.het_job_offset in wanted[r.het_job_id]
    ]


def _jobs_for(client: Client, ids: Sequence[tuple[int, int | None]]) -> list[JobView]:
    """The jobs the ids name: a plain id is a job, and also an array (all its tasks)."""
    found: dict[int, JobView] = {}
    plain = sorted({i for i, task in ids if task is None})
    for start in range(0, len(plain), 500):
        page = client.jobs(ids=plain[start : start + 500], limit=1000)
        found.update({j.id: j for j in page.items})
    for array in sorted({i for i, _ in ids}):
        arrays = client.jobs(array=array, limit=1000).items
        tasks = {
            j.spec.slurm.array.task_id: j
            for j in arrays
            if j.spec and j.spec.slurm and j.spec.slurm.array
        }
        wanted = [task for i, task in ids if i == array]
        if None in wanted:
            found.update({j.id: j for j in arrays})
        for task in wanted:
            if task is not None and task in tasks:
                found[tasks[task].id] = tasks[task]
    return [found[k] for k in sorted(found)]


# --- commands ----------------------------------------------------------------------------


def sbatch(args: Sequence[str], out: TextIO) -> int:
    from gpuyard.slurm import render
    from gpuyard.slurm import sbatch as build

    def read_stdin() -> bytes | None:
        if sys.stdin is None or sys.stdin.isatty():
            return None
        return sys.stdin.buffer.read(MAX_SCRIPT + 1)

    try:
        options, script, name = build.parse(args, read_stdin)
        with _client() as client:
            pools = [p.name for p in client.pools()]
            specs = build.specs_from_here(options, script, script_name=name, pools=pools)
            first = client.submit(specs[0])
            for spec in specs[1:]:
                spec["slurm"]["array"]["job_id"] = first.id
            submitted: list[int] = []
            try:
                for start in range(1, len(specs), 1000):
                    submitted += client.submit_many(specs[start : start + 1000])
            except ClientError:
                # All of the array or none of it: what was queued goes.
                queued = [first.id, *submitted]
                client.stop_many(queued)
                client.delete_many(queued)  # a task that already started is only stopped
                raise
    except OptionError as exc:
        # Slurm's sbatch ends option errors with 255.
        if str(exc).startswith("unrecognized option"):
            option = str(exc).split("'")[1]
            raise CommandError(
                render.SBATCH_UNRECOGNIZED.format(option=option), status=255, raw=True
            ) from None
        raise CommandError(str(exc), status=255) from None
    if "parsable" in options.values:
        out.write(f"{first.id}\n")
    else:
        out.write(f"Submitted batch job {first.id}\n")
    return 0


def scancel(args: Sequence[str], out: TextIO) -> int:  # noqa: PLR0912, PLR0915 - one pass over Slurm's options, read top to bottom
    from gpuyard.slurm import render

    signal = None
    batch = False
    ids: list[str] = []
    user = None
    states: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-s", "--signal"):
            i += 1
            if i >= len(args):
                raise CommandError("option '--signal' requires an argument")
            signal = args[i]
        elif arg.startswith("--signal="):
            signal = arg.split("=", 1)[1]
        elif arg.startswith("-s") and len(arg) > 2:
            signal = arg[2:]
        elif arg in ("-b", "--batch"):
            batch = True
        elif arg in ("-f", "--full"):
            batch = False
        elif arg in ("-u", "--user"):
            i += 1
            user = args[i] if i < len(args) else None
        elif arg.startswith("--user="):
            user = arg.split("=", 1)[1]
        elif arg in ("-t", "--state"):
            i += 1
            states.add(args[i].upper() if i < len(args) else "")
        elif arg.startswith("--state="):
            states.add(arg.split("=", 1)[1].upper())
        elif arg in ("-Q", "--quiet", "-v", "--verbose", "-i", "--interactive"):
            pass
        elif arg.startswith("-"):
            raise CommandError(f"unrecognized option '{arg}'")
        else:
            ids.append(arg)
        i += 1
    try:
        parsed = _parse_ids(ids)
    except BadJobId as exc:
        raise CommandError(render.SCANCEL_BAD_ID.format(text=exc.text), raw=True) from None
    if components := het_components(ids):
        job_id, offsets = min(components.items())
        raise CommandError(
            f"Kill job error on job id {job_id}+{min(offsets)}: the components of a "
            f"heterogeneous job stop together here; scancel {job_id} stops them all"
        )
    with _client() as client:
        if ids:
            # An id that names no job is not an error for Slurm's scancel (it prints nothing).
            jobs = _jobs_for(client, parsed)
        elif user:
            jobs = client.jobs(owner=user, status=["queued", "running"], limit=1000).items
        else:
            raise CommandError("No job identification provided")
        if states:
            want = {"PD": "PENDING", "R": "RUNNING"}
            named = {want.get(s, s) for s in states}
            jobs = [j for j in jobs if job_record(j).state in named]
        status = 0
        for job in jobs:
            if job.state.is_terminal():
                continue
            try:
                if signal is not None:
                    client.signal(job.id, _signum(signal), steps=not batch)
                else:
                    client.stop(job.id)
            except ClientError as exc:
                print(
                    printable(f"scancel: error: Kill job error on job id {job.id}: {exc.detail}"),
                    file=sys.stderr,
                )
                status = 1
    return status


def _signum(text: str) -> int:
    try:
        return signal_number(text)
    except ValueError:
        raise CommandError(f"Unknown job signal: {text}") from None


def _scontrol_hold(words: Sequence[str]) -> int:
    """``scontrol hold|uhold|release ID…``."""
    if len(words) < 2:
        raise CommandError("Invalid job id specified")
    try:
        ids = _parse_ids(words[1:])
    except BadJobId as exc:
        raise CommandError(f"Invalid job id specified: {exc.text}") from None
    with _client() as client:
        jobs = [job.id for job in _jobs_for(client, ids)]
        failed = []
        for start in range(0, len(jobs), 1000):  # one request for a whole queue
            result = client.hold_many(jobs[start : start + 1000], held=words[0] != "release")
            failed += result.failed
    if failed:
        raise CommandError(f"Job {failed[0].id}: {failed[0].detail}")
    return 0


def scontrol(args: Sequence[str], out: TextIO) -> int:  # noqa: PLR0911, PLR0912, PLR0915 - one branch per subcommand
    from gpuyard.slurm import render

    words = [a for a in args if a not in ("-o", "--oneliner", "-d", "--details", "-Q")]
    oneliner = "-o" in args or "--oneliner" in args
    if words[:2] in (["show", "hostnames"], ["show", "hostname"], ["show", "hostlist"]):
        text = words[2] if len(words) > 2 else os.environ.get("SLURM_JOB_NODELIST", "")
        if not text:
            raise CommandError("No hostlist specified")
        try:
            shown = (
                render.render_show_hostlist(text)
                if words[1] == "hostlist"
                else render.render_show_hostnames(text)
            )
        except ValueError:
            # Slurm 22.05 says so on stderr and still exits 0.
            print(render.INVALID_HOSTLIST.format(text=text), file=sys.stderr)
            return 0
        out.write(shown)
        return 0
    if words[:2] == ["show", "job"] or (
        words[:1] == ["show"] and len(words) > 1 and words[1].startswith("job")
    ):
        with _client() as client:
            if len(words) > 2:
                try:
                    jobs = _jobs_for(client, _parse_ids(words[2:3]))
                except BadJobId:
                    jobs = []
                if not jobs:
                    print(render.SCONTROL_SHOW_JOB_INVALID, file=sys.stderr)
                    return 1
            else:
                jobs = client.jobs(limit=1000).items
            now = time.time()
            records = only_components(
                [r for j in jobs for r in job_records(j)], het_components(words[2:3])
            )
            texts = [render.render_scontrol_show_job(r, now=now) for r in records]
        if oneliner:
            texts = [" ".join(t.split()) + " \n" for t in texts]  # as Slurm: a space ends it
        out.write("".join(texts))  # each block ends with its blank line
        return 0
    if words[:1] in (["requeue"], ["requeuehold"]):
        if len(words) < 2:
            raise CommandError("Invalid job id specified")
        try:
            ids = _parse_ids(words[1:])
        except BadJobId as exc:
            raise CommandError(
                render.SCONTROL_REQUEUE_INVALID.format(text=exc.text), raw=True
            ) from None
        if components := het_components(words[1:]):
            # Slurm requeues a heterogeneous job whole, by its first id only.
            job_id, offsets = min(components.items())
            raise CommandError(
                render.SCONTROL_REQUEUE_INVALID.format(text=f"{job_id}+{min(offsets)}"), raw=True
            )
        with _client() as client:
            for job in _jobs_for(client, ids):
                try:
                    client.suspend(job.id)
                except ClientError as exc:
                    raise CommandError(f"Requeue of job {job.id} failed: {exc.detail}") from None
        return 0
    if words[:1] in (["hold"], ["uhold"], ["release"]):
        return _scontrol_hold(words)
    if words[:2] == ["show", "config"]:
        out.write(
            f"Configuration data as of {time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
            "ClusterName             = gpuyard\nMinJobAge               = 300 sec\n"
            f"SLURM_VERSION           = 22.05.8\n"
        )
        return 0
    if words[:1] in (["ping"],):
        with _client() as client:
            client.health()
        out.write("Slurmctld(primary) at gpuyard is UP\n")
        return 0
    raise CommandError(
        f"`scontrol {' '.join(args)}` is not supported; gpuyard answers show job, show "
        "hostnames, show hostlist, show config, requeue, hold, release and ping (docs/slurm.md)"
    )


COMMANDS: dict[str, Callable[[Sequence[str], TextIO], int]] = {
    "sbatch": sbatch,
    "scancel": scancel,
    "scontrol": scontrol,
}


def _register_views() -> None:
    from gpuyard.slurm import views

    COMMANDS.update(views.COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    _register_views()
    if not args or args[0] not in COMMANDS:
        print(
            f"usage: python -m gpuyard.slurm {{{'|'.join(sorted(COMMANDS))}}} ...", file=sys.stderr
        )
        return 1
    name, rest = args[0], args[1:]
    if rest in (["--version"], ["-V"]):
        print(SLURM_VERSION)
        return 0
    # Job names, commands, env and reasons are their owners' text: whatever a command
    # prints reaches the terminal without escape sequences (gpuyard.terminal).
    out = cast(TextIO, PrintableWriter(sys.stdout))
    try:
        return COMMANDS[name](rest, out)
    except CommandError as exc:
        print(printable(str(exc) if exc.raw else f"{name}: error: {exc}"), file=sys.stderr)
        return exc.status
    except OptionError as exc:
        print(printable(f"{name}: error: {exc}"), file=sys.stderr)
        return 1
    except ClientError as exc:
        print(printable(f"{name}: error: {exc.detail}"), file=sys.stderr)
        return 1
