"""Jobs as Slurm sees them: gpuyard's job views as Slurm records, and the jobs that ids or
filters name (shared by ``sacct``, ``squeue``, ``scancel`` and ``scontrol``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from gpuyard.client import Client
from gpuyard.models import After, JobState, JobView
from gpuyard.models.job_query import MAX_PAGE
from gpuyard.models.slurm import SlurmState, SlurmStepView
from gpuyard.models.waiting import WaitCode
from gpuyard.slurm.records import JobRecord, StepRecord

__all__ = [
    "SHORT_STATES",
    "STATUS_OF",
    "all_jobs",
    "asked_states",
    "collapse_pending_arrays",
    "index_ranges",
    "job_record",
    "job_records",
    "jobs_for",
    "matching",
    "only_components",
    "pool_statuses",
    "records_of",
    "srun_steps",
]


_STATE: dict[JobState, SlurmState] = {
    JobState.QUEUED: SlurmState.PENDING,
    JobState.SUSPENDED: SlurmState.PENDING,
    JobState.STARTING: SlurmState.RUNNING,
    JobState.RUNNING: SlurmState.RUNNING,
    JobState.STOPPING: SlurmState.COMPLETING,
    JobState.EXPIRING: SlurmState.COMPLETING,
    JobState.FAILING: SlurmState.COMPLETING,
    JobState.COMPLETING: SlurmState.COMPLETING,
    JobState.SUSPENDING: SlurmState.COMPLETING,
    JobState.RECOVERING: SlurmState.COMPLETING,
    # Held for debugging: its allocation kept, its processes stopped, as a Slurm job that
    # `scontrol suspend` stopped (squeue's S); it runs again on `gpuyard exec JOB start`.
    JobState.HALTING: SlurmState.SUSPENDED,
    JobState.HELD: SlurmState.SUSPENDED,
    JobState.RESTARTING: SlurmState.RUNNING,
    JobState.SUCCEEDED: SlurmState.COMPLETED,
    JobState.FAILED: SlurmState.FAILED,
    JobState.STOPPED: SlurmState.CANCELLED,
    JobState.EXPIRED: SlurmState.TIMEOUT,
}


# Slurm's accounting database records a job's end as soon as it ends, while its nodes still clean
# up: sacct never shows squeue's COMPLETING, only the state the job heads to (clients such as
# torchx read sacct and know only the states the database holds). A job being suspended or
# recovered still runs until it is back in the queue or restarted.
_ACCOUNTED: dict[JobState, SlurmState] = {
    JobState.STOPPING: SlurmState.CANCELLED,
    JobState.EXPIRING: SlurmState.TIMEOUT,
    JobState.FAILING: SlurmState.FAILED,
    JobState.COMPLETING: SlurmState.COMPLETED,
    JobState.SUSPENDING: SlurmState.RUNNING,
    JobState.RECOVERING: SlurmState.RUNNING,
}


def slurm_state(state: JobState, *, accounting: bool = False) -> SlurmState:
    """The Slurm state of a job: squeue's, or with ``accounting`` sacct's."""
    if accounting and state in _ACCOUNTED:
        return _ACCOUNTED[state]
    return _STATE[state]


_SLURM_AFTER = {
    After.STARTED: "after",
    After.ENDED: "afterany",
    After.SUCCEEDED: "afterok",
    After.FAILED: "afternotok",
}


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _srun_step(
    step: SlurmStepView, job_state: SlurmState, cpus_per_task: int, job_end: float | None
) -> StepRecord:
    """An ``srun`` step as sacct shows it: COMPLETED, FAILED with its code, CANCELLED with the
    signal that ended it; RUNNING while it runs, CANCELLED if its job ended first."""
    code, signal, end = step.exit_code, 0, step.end
    if code is None:
        running = job_state in (SlurmState.RUNNING, SlurmState.COMPLETING)
        state = SlurmState.RUNNING if running else SlurmState.CANCELLED
        if not running:
            end = job_end
            signal = 15 if job_state in (SlurmState.CANCELLED, SlurmState.TIMEOUT) else 9
        code = 0
    elif code > 128:
        state, signal, code = SlurmState.CANCELLED, code - 128, 0
    else:
        state = SlurmState.COMPLETED if code == 0 else SlurmState.FAILED
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


def _pending_reason(job: JobView) -> str:
    """Why a pending job waits, in Slurm's words."""
    reason = "BeginTime" if job.state is JobState.SUSPENDED else "Priority"
    code = job.wait_code
    if code is WaitCode.HELD:
        reason = "JobHeldUser"
    elif code is WaitCode.DEPENDENCY:
        never = (job.reason or "").startswith("can never")
        reason = "DependencyNeverSatisfied" if never else "Dependency"
    elif code is WaitCode.BEGIN:
        reason = "BeginTime"
    elif code is WaitCode.ARRAY_LIMIT:
        reason = "JobArrayTaskLimit"
    elif code is not None:
        reason = "Resources" if code is WaitCode.RESOURCES else "Priority"
    return reason


def _job_steps(
    job: JobView,
    state: SlurmState,
    nodes: tuple[str, ...],
    outcome: tuple[int, int],
    times: tuple[float, float | None],
    srun_steps: Sequence[SlurmStepView],
) -> list[StepRecord]:
    """The steps of a started Slurm batch job: ``batch``, ``extern`` and its ``srun`` steps;
    ``outcome`` is the job's (exit code, signal), ``times`` its (start, end)."""
    spec = job.spec
    slurm = spec.slurm if spec is not None else None
    (exit_code, signal), (start, end) = outcome, times
    steps: list[StepRecord] = []
    step_state = state if state != SlurmState.COMPLETING else SlurmState.RUNNING
    steps.append(
        StepRecord(
            name="batch",
            state=SlurmState.CANCELLED if state == SlurmState.CANCELLED else step_state,
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
            state=SlurmState.RUNNING
            if state in (SlurmState.RUNNING, SlurmState.COMPLETING)
            else SlurmState.COMPLETED,
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
    return steps


def job_record(
    job: JobView,
    uid: int = 0,
    srun_steps: Sequence[SlurmStepView] = (),
    *,
    accounting: bool = False,
) -> JobRecord:
    """The job as Slurm shows it: as squeue does, or with ``accounting`` as sacct does."""
    spec = job.spec
    slurm = spec.slurm if spec is not None else None
    nodes = tuple(dict.fromkeys(slot.node for slot in job.placement)) or tuple(
        dict.fromkeys(w.node for w in job.workers if w.attempt == job.attempt)
    )
    state = slurm_state(job.state, accounting=accounting)
    exit_code = job.exit_code or 0
    signal = 0
    if exit_code > 128 and state in (SlurmState.FAILED, SlurmState.CANCELLED, SlurmState.TIMEOUT):
        signal, exit_code = exit_code - 128, 0
    array_id = array_task = None
    throttle = 0
    if slurm is not None and slurm.array is not None:
        array_id = slurm.array.job_id or job.id
        array_task = str(slurm.array.task_id)
        throttle = slurm.array.throttle or 0
    reason = _pending_reason(job) if state == SlurmState.PENDING else "None"
    start, end = _ts(job.started_at), _ts(job.finished_at)
    steps: list[StepRecord] = []
    if slurm is not None and start is not None and nodes:
        steps = _job_steps(job, state, nodes, (exit_code, signal), (start, end), srun_steps)
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
        cancelled_by=(slurm.uid if slurm is not None else uid)
        if state == SlurmState.CANCELLED
        else None,
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
        exclusive=spec is not None and spec.exclusive is True,  # asked for, as --exclusive
        steps=tuple(steps),
    )


def job_records(
    job: JobView,
    uid: int = 0,
    srun_steps: Sequence[SlurmStepView] = (),
    *,
    accounting: bool = False,
) -> list[JobRecord]:
    """What Slurm shows of a job: one record, or one per component of a heterogeneous job
    (``L+0``, ``L+1``, ... whose own ids are L, L+1, ...). The components share the job's state
    and exit code; each has its own name, nodes, sizes and ``extern`` step, the first also the
    ``batch`` step, and each step row shows under the components whose nodes it ran on."""
    record = job_record(job, uid, srun_steps, accounting=accounting)
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


def only_components(records: list[JobRecord], wanted: dict[int, set[int]]) -> list[JobRecord]:
    """``records`` less the components of the jobs in ``wanted`` that it does not name."""
    return [
        r for r in records if r.het_job_id not in wanted or r.het_job_offset in wanted[r.het_job_id]
    ]


def jobs_for(client: Client, ids: Sequence[tuple[int, int | None]]) -> list[JobView]:
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


def records_of(
    jobs: Sequence[JobView],
    steps: dict[int, list[SlurmStepView]] | None = None,
    *,
    accounting: bool = False,
) -> list[JobRecord]:
    return [
        r
        for j in jobs
        for r in job_records(j, srun_steps=(steps or {}).get(j.id, ()), accounting=accounting)
    ]


def srun_steps(client: Client, jobs: Sequence[JobView]) -> dict[int, list[SlurmStepView]]:
    """The srun steps of the Slurm batch jobs that have started (sacct's ``.0``, ``.1`` rows)."""
    return {
        j.id: client.slurm_steps(j.id)
        for j in jobs
        if j.started_at is not None and j.spec is not None and j.spec.slurm is not None
    }


def all_jobs(client: Client, *, status: list[str] | None, **filters: Any) -> list[JobView]:
    """Every job the filters match, a page of :data:`MAX_PAGE` at a time (``status`` None:
    states no gpuyard job is ever in were asked for, so none)."""
    out: list[JobView] = []
    if status is None:
        return out
    filters["status"] = status
    while True:
        page = client.jobs(offset=len(out), limit=MAX_PAGE, **filters)
        out += page.items
        if not page.items or len(out) >= page.total:
            return out


STATUS_OF = {
    "PENDING": "queued", "PD": "queued", "REQUEUED": "queued", "RQ": "queued",
    "RUNNING": "running", "R": "running", "COMPLETING": "running", "CG": "running",
    "SUSPENDED": "running", "S": "running",
    "COMPLETED": "succeeded", "CD": "succeeded", "FAILED": "failed", "F": "failed",
    "CANCELLED": "stopped", "CA": "stopped", "TIMEOUT": "expired", "TO": "expired",
}  # fmt: skip


def pool_statuses(states: Iterable[str], *, accounting: bool = False) -> list[str] | None:
    """The statuses to ask the pool for, for Slurm's ``--state`` list (empty: all of them;
    None: none can match, as for the states gpuyard never shows, NODE_FAIL, ...). With
    ``accounting`` (sacct) an end state also matches the jobs still ending, still running."""
    wanted = [s for s in states if s]
    if not wanted or "ALL" in wanted:
        return []
    statuses = {STATUS_OF[s] for s in wanted if s in STATUS_OF}
    if accounting and statuses - {"queued", "running"}:
        statuses.add("running")
    return sorted(statuses) or None


SHORT_STATES = {
    "PD": SlurmState.PENDING,
    "R": SlurmState.RUNNING,
    "CG": SlurmState.COMPLETING,
    "CD": SlurmState.COMPLETED,
    "CA": SlurmState.CANCELLED,
    "F": SlurmState.FAILED,
    "TO": SlurmState.TIMEOUT,
    "S": SlurmState.SUSPENDED,
    "PR": SlurmState.PREEMPTED,
    "NF": SlurmState.NODE_FAIL,
    "RQ": SlurmState.REQUEUED,
}


def asked_states(texts: Iterable[str]) -> set[str]:
    """The Slurm states of a ``--state``/``--states`` list, short names (``PD``) spelt out."""
    return {SHORT_STATES.get(s.upper(), s.upper()) for s in texts}


def matching(
    records: list[JobRecord],
    *,
    states: Iterable[str] = (),
    partitions: Iterable[str] = (),
    names: Iterable[str] = (),
) -> list[JobRecord]:
    """The rows sacct and squeue keep of what the pool sent: in one of ``states`` (none, or
    ``ALL``: any), ``partitions`` and ``names`` (none: any)."""
    wanted_states, wanted_partitions, wanted_names = set(states), set(partitions), set(names)
    if wanted_states and "ALL" not in wanted_states:
        records = [r for r in records if r.state in wanted_states]
    if wanted_partitions:
        records = [r for r in records if r.partition in wanted_partitions]
    if wanted_names:
        records = [r for r in records if r.name in wanted_names]
    return records


def collapse_pending_arrays(records: list[JobRecord]) -> list[JobRecord]:
    """An array's pending tasks are one row, ``A_[2-9%2]``, as Slurm shows them."""
    pending: dict[int, list[JobRecord]] = {}
    out: list[JobRecord] = []
    for record in records:
        if record.array_job_id is not None and record.state == SlurmState.PENDING:
            if record.array_job_id not in pending:
                out.append(record)  # its place in the listing
            pending.setdefault(record.array_job_id, []).append(record)
        else:
            out.append(record)
    for index, record in enumerate(out):
        group = pending.get(record.array_job_id or -1)
        if record.state != SlurmState.PENDING or not group or len(group) == 1:
            continue
        text = index_ranges(sorted(int(r.array_task or 0) for r in group))
        if record.array_throttle:
            text += f"%{record.array_throttle}"
        out[index] = dataclasses.replace(
            record, array_task=f"[{text}]", job_id=record.array_job_id or record.job_id
        )
    return out


def index_ranges(numbers: Sequence[int]) -> str:
    """``[2, 3, 4, 7]`` → ``2-4,7``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
