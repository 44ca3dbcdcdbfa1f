"""Starting and finishing a suspension: the two writes every path to "suspended" shares.

A job is suspended because a higher tier needs its room (the scheduler), an elastic job grows
(the scheduler), a person asks (the API), or the job asks itself (its runtime's ``suspend()``).
All of them begin with :func:`begin_suspension` and end, once every worker has exited, with
:func:`finish_suspension`. The notices, the deadline and the signals in between are the
controller's (:mod:`gpuyard.controller.suspension`); the protocol is docs/preemption.md.
A person may keep a suspended job from being placed again, a pause: :func:`set_held` holds it
(before or while it suspends) and releases it.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.errors import Conflict
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.states import PENDING, JobState
from gpuyard.quantities import format_duration
from gpuyard.scheduler.snapshot import DEFAULT_POOL, PoolPolicy
from gpuyard.services.auth import Audit
from gpuyard.services.transitions import record_event, transition
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import JobRow, NodeRow, PoolRow

__all__ = ["HOLDABLE", "begin_suspension", "finish_suspension", "notice_seconds", "set_held"]

HOLDABLE = PENDING | {JobState.SUSPENDING}
"""Where a job may be held or released: waiting, or on its way back to the queue (a held
suspending job stays held once suspended: a pause)."""


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


def set_held(
    session: Session, row: JobRow, *, actor: str, held: bool, now: float, audit: Audit
) -> None:
    """Hold a job (it is not placed again until released) or release it; holding a held job,
    or releasing a free one, changes nothing. Raise Conflict for a job not in
    :data:`HOLDABLE`: a running job is paused by suspending it with a hold."""
    state = JobState(row.state)
    if state not in HOLDABLE:
        raise Conflict(
            f"job {row.id} is {state.value}; only a queued, suspending or suspended job can be "
            f"{'held' if held else 'released'}"
            + (
                f" (`gpuyard suspend --hold {row.id}` suspends a running one and holds it)"
                if held
                else ""
            ),
            extra={"state": state.value},
        )
    if bool(row.held) is held:
        return
    guarded_update(session, row, held=held)  # a new version: a start decided is dropped
    audit.record(
        session, Actor.user(actor), f"job.{'hold' if held else 'release'}", f"job:{row.id}"
    )
    record_event(
        session,
        row,
        kind=EventKind.HOLD if held else EventKind.RELEASE,
        actor=Actor.user(actor),
        reason=f"held by {actor}" if held else f"released by {actor}",
        time=now,
    )
