"""Starting and finishing a suspension: the two writes every path to "suspended" shares.

A job is suspended because a higher tier needs its room (the scheduler), an elastic job grows
(the scheduler), a person asks (the API), or the job asks itself (its runtime's ``suspend()``).
All of them begin with :func:`begin_suspension` and end, once every worker has exited, with
:func:`finish_suspension`. The notices, the deadline and the signals in between are the
controller's (:mod:`gpuyard.controller.suspension`); the protocol is docs/preemption.md.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.models.actor import Actor
from gpuyard.models.states import JobState
from gpuyard.quantities import format_duration
from gpuyard.scheduler.snapshot import DEFAULT_POOL, PoolPolicy
from gpuyard.services.transitions import transition
from gpuyard.store.tables import JobRow, NodeRow, PoolRow

__all__ = ["begin_suspension", "finish_suspension", "notice_seconds"]


def notice_seconds(session: Session, job: JobRow) -> float:
    """How long the job has to checkpoint and exit: its pool's notice period."""
    first = (job.placement or [{}])[0].get("node")
    pool = DEFAULT_POOL
    if first:
        node = session.get(NodeRow, first)
        if node is not None:
            pool = node.effective_labels().get("pool") or DEFAULT_POOL
    row = session.scalars(select(PoolRow).where(PoolRow.name == pool)).first()
    return row.notice if row is not None else PoolPolicy().notice


def begin_suspension(
    session: Session,
    job: JobRow,
    *,
    actor: Actor,
    why: str,
    now: float,
    notice: float | None = None,
) -> None:
    """Move a running job to ``suspending`` with a deadline (its pool's notice period unless
    ``notice`` says otherwise); raise StaleWrite or IllegalTransition like :func:`transition`."""
    deadline = now + (notice_seconds(session, job) if notice is None else notice)
    transition(
        session,
        job,
        JobState.SUSPENDING,
        actor=actor,
        why=f"{why}; it has until {format_duration(deadline - now)} from now to checkpoint "
        "and exit",
        time=now,
        suspend_deadline=deadline,
        reason=why,
    )


def finish_suspension(session: Session, job: JobRow, *, actor: Actor, why: str, now: float) -> None:
    """Every worker has exited: back in the queue at the original position, as the next
    attempt. What the attempt ran (from ``started_at``) is added to the job's ``ran`` and,
    per GPU, to its ``attained`` service."""
    gpus = sum(len(slot.get("gpus") or ()) for slot in job.placement or [])
    ran = max(0.0, now - job.started_at) if job.started_at is not None else 0.0
    transition(
        session,
        job,
        JobState.SUSPENDED,
        actor=actor,
        why=why,
        time=now,
        attempt=job.attempt + 1,
        attained=(job.attained or 0.0) + gpus * ran,
        # Run time and wait add up to the time since submission: the wait (what a pool's
        # age_halflife ages a job by) is the rest, exact whatever the attempts were.
        ran=(job.ran or 0.0) + ran,
        suspensions=(job.suspensions or 0) + 1,
        placement=None,
        token=None,
        suspend_deadline=None,
        reason=f"suspended ({job.reason or 'no reason given'}); waiting to resume",
    )
