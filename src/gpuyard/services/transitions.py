"""The one transition function for jobs, and the event log it writes.

Every state change of a job, whether a person, the scheduler or the controller causes it, goes
through :func:`transition`: it checks the move against the table in
:mod:`gpuyard.models.states`, applies it with an UPDATE guarded by id + version (so a decision
made on a stale read changes nothing), and writes an event with who, why, when and where.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.states import JobState, check_transition
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import EventRow, JobRow

__all__ = ["record_event", "transition"]


def record_event(
    session: Session,
    job: JobRow,
    *,
    kind: EventKind,
    actor: Actor,
    reason: str = "",
    node: str | None = None,
    time: float,
    from_state: str | None = None,
    to_state: str | None = None,
) -> EventRow:
    """Append a non-transition event (a signal sent, a worker exit, …) to the job's log."""
    event = EventRow(
        job_id=job.id,
        time=time,
        kind=kind,
        actor=actor,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        node=node,
        attempt=job.attempt,
    )
    session.add(event)
    return event


def transition(
    session: Session,
    job: JobRow,
    target: JobState,
    *,
    actor: Actor,
    why: str,
    time: float,
    node: str | None = None,
    **changes: Any,
) -> None:
    """Move ``job`` to ``target`` and record it; raise IllegalTransition or StaleWrite.

    ``why`` is the event's reason; ``changes`` are further columns to set in the same guarded
    write (placement, times, the job's ``reason`` column, …).
    ``job`` is updated in place to match the row.
    """
    current = JobState(job.state)
    check_transition(job.id, current, target)
    values: dict[str, Any] = {"state": target, **changes}
    if target.is_terminal() and "finished_at" not in values:
        values["finished_at"] = time
    guarded_update(session, job, **values)
    record_event(
        session,
        job,
        kind=EventKind.TRANSITION,
        actor=actor,
        reason=why,
        node=node,
        time=time,
        from_state=current.value,
        to_state=target.value,
    )
