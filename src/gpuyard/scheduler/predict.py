"""Queue prediction: when would a job start? The same ``decide()``, run forward in time.

Every running job is taken to end at its max runtime (the user's own limit: the latest it can
end). From the snapshot, repeat: decide; the jobs it starts run from now until their max
runtime; jump to the next expected end; free that job's room. The job's first start in this
replay is the prediction. A job waiting for room that only a job without a max runtime holds
gets no time: the answer names the jobs it waits for instead.

Reference 002 (排队预测) asks for exactly this: "starts now", or "starts at about T, behind these
jobs".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuyard.quantities import format_duration
from gpuyard.scheduler.decide import Preempt, Start, WaitCode, decide
from gpuyard.scheduler.snapshot import Member, PendingJob, Request, RunningJob, Snapshot

__all__ = ["Forecast", "in_words", "predict"]

MAX_STEPS = 2_000


@dataclass(frozen=True, slots=True)
class Forecast:
    job_id: int
    start_at: float | None
    """When it should start (None: never, or only after jobs without a max runtime end)."""
    now: bool = False
    ahead: tuple[int, ...] = ()
    """Queued jobs that start before it."""
    waits_for: tuple[int, ...] = ()
    """Running jobs whose end frees the room it gets, or that it waits on with no known end."""
    never: str | None = None
    """Why it can never start, if so."""
    unknown: bool = False
    """It waits for jobs without a max runtime: no time can be given."""


def predict(snapshot: Snapshot, job_id: int, *, max_steps: int = MAX_STEPS) -> Forecast:
    """When job ``job_id`` (one of ``snapshot.pending``) should start."""
    state = snapshot
    ahead: list[int] = []
    ended: dict[int, RunningJob] = {}
    # Jobs already on their way out leave at once (their room is what the next start uses).
    leaving = [r for r in state.running if r.suspending]
    if leaving:
        ended.update({r.id: r for r in leaving})
        state = replace(state, running=tuple(r for r in state.running if not r.suspending))
    for step in range(max_steps):
        decisions = decide(state)
        started = {s.job_id: s for s in decisions.starts}
        if job_id in started:
            order = [s.job_id for s in decisions.starts]
            ahead += order[: order.index(job_id)]  # placed before it in the same cycle
            nodes = {a.node for a in started[job_id].allocations}
            freed = tuple(
                sorted(j for j, r in ended.items() if any(a.node in nodes for a in r.allocations))
            )
            return Forecast(job_id, state.now, step == 0 and not leaving, tuple(ahead), freed)
        wait = decisions.waits.get(job_id)
        if wait is not None and wait.code in (WaitCode.UNSATISFIABLE, WaitCode.POOL):
            return Forecast(job_id, None, never=wait.message)
        state, newly = _apply(state, decisions.starts, decisions.preempts)
        ahead += newly
        if decisions.preempts:
            continue  # the victims have left: decide again at the same time
        upcoming = [r.expected_end for r in state.running if r.expected_end is not None]
        later = [t for t in upcoming if t > state.now]
        if not later:
            blockers = tuple(sorted(r.id for r in state.running if r.expected_end is None))
            return Forecast(job_id, None, ahead=tuple(ahead), waits_for=blockers, unknown=True)
        now = min(later)
        finished = [
            r for r in state.running if r.expected_end is not None and r.expected_end <= now
        ]
        ended.update({r.id: r for r in finished})
        state = replace(
            state,
            now=now,
            running=tuple(r for r in state.running if r.id not in ended),
        )
    return Forecast(job_id, None, ahead=tuple(ahead), unknown=True)


def _apply(
    state: Snapshot, starts: list[Start], preempts: list[Preempt]
) -> tuple[Snapshot, list[int]]:
    """The snapshot after the starts (now running until their max runtime) and suspensions
    (their jobs go back to the queue at their original position)."""
    pending = {p.id: p for p in state.pending}
    running = {r.id: r for r in state.running}
    newly = []
    for start in starts:
        job = pending.pop(start.job_id)
        newly.append(job.id)
        running[job.id] = RunningJob(
            id=job.id,
            priority=job.priority,
            owner=job.owner,
            allocations=start.allocations,
            group=job.group,
            started_at=state.now,
            max_runtime=job.max_runtime,
            preemptible=True,
        )
    for p in preempts:
        victim = running.pop(p.job_id, None)
        if victim is not None:
            pending[victim.id] = _requeued(victim)
    return (
        replace(state, pending=tuple(pending.values()), running=tuple(running.values())),
        newly,
    )


def _requeued(job: RunningJob) -> PendingJob:
    members = tuple(
        Member(len(a.gpus), a.cpus, a.memory, whole_node=a.exclusive) for a in job.allocations
    )
    return PendingJob(
        id=job.id,
        version=job.version,
        priority=job.priority,
        seq=job.id,
        owner=job.owner,
        request=Request(members),
        group=job.group,
        max_runtime=job.max_runtime,
    )


def in_words(forecast: Forecast, now: float) -> str:
    """The forecast as a sentence."""
    if forecast.never is not None:
        return f"it can never start: {forecast.never}"
    if forecast.now:
        return "starts now"
    behind = f", behind {_jobs(forecast.ahead)}" if forecast.ahead else ""
    if forecast.start_at is not None and not math.isinf(forecast.start_at):
        return f"starts in about {format_duration(max(0.0, forecast.start_at - now))}{behind}"
    if forecast.waits_for:
        which = _jobs(forecast.waits_for)
        return f"no start time can be given: it waits for {which}, with no max runtime{behind}"
    return f"no start time can be given within {MAX_STEPS} scheduling steps{behind}"


def _jobs(ids: tuple[int, ...]) -> str:
    return ("jobs " if len(ids) > 1 else "job ") + ", ".join(map(str, ids))
