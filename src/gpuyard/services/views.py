"""Rows -> API models. The only place that knows both shapes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from gpuyard.models import JobEvent, JobSpec, JobState, JobStatus, JobView, Slot, WorkerView
from gpuyard.models.access import OFFERED_JOB_ACTIONS, Access, Action
from gpuyard.models.events import EventKind
from gpuyard.models.holding import held_gpus
from gpuyard.models.states import HELD_STATES
from gpuyard.models.validation import readable_validation_errors
from gpuyard.models.waiting import WaitCode
from gpuyard.store.tables import EventRow, JobRow, WorkerRow

__all__ = ["event_view", "job_view", "queued_view", "stored_spec", "to_datetime"]


def to_datetime(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


def job_view(
    row: JobRow, workers: list[WorkerRow] | None = None, *, allowed: Sequence[Action] = ()
) -> JobView:
    state = JobState(row.state)
    spec, spec_error = stored_spec(row)
    return JobView(
        id=row.id,
        name=row.name,
        owner=row.owner,
        status=state.status,
        state=state,
        spec=spec,
        spec_error=spec_error,
        attempt=row.attempt,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        started_at=to_datetime(row.started_at),
        finished_at=to_datetime(row.finished_at),
        exit_code=row.exit_code,
        reason=row.reason,
        wait_code=WaitCode(row.wait_code)
        if state.status is JobStatus.QUEUED and row.wait_code
        else None,
        start_at=to_datetime(row.start_at) if state.status is JobStatus.QUEUED else None,
        group=row.group_name or "",
        access=Access(row.access or Access.NONE.value),
        allowed=list(allowed),
        suspensions=row.suspensions or 0,
        on_hold=bool(row.held),
        restarts=row.restarts or 0,
        held_until=to_datetime(row.held_until) if state in HELD_STATES else None,
        placement=[Slot.model_validate(s) for s in row.placement or []],
        held_gpus=held_gpus(row.placement),
        workers=[
            WorkerView(
                rank=w.rank,
                attempt=w.attempt,
                node=w.node,
                state=w.state,
                role=w.role,
                exit_code=w.exit_code,
                started_at=to_datetime(w.started_at),
                finished_at=to_datetime(w.finished_at),
            )
            for w in workers or []
        ],
    )


def queued_view(job_id: int, row: dict[str, Any], *, spec: JobSpec) -> JobView:
    """A job just queued, from the spec it was submitted with and the values inserted for it
    (nothing to read back or validate again)."""
    return JobView.model_construct(
        id=job_id,
        name=row["name"],
        owner=row["owner"],
        status=JobStatus.QUEUED,
        state=JobState.QUEUED,
        spec=spec,
        spec_error=None,
        attempt=0,
        created_at=datetime.fromtimestamp(row["created_at"], UTC),
        started_at=None,
        finished_at=None,
        exit_code=None,
        reason=None,
        wait_code=None,
        start_at=None,
        group=row["group_name"],
        access=spec.access,
        allowed=list(OFFERED_JOB_ACTIONS),
        suspensions=0,
        on_hold=spec.hold,
        held_until=None,
        placement=[],
        workers=[],
    )


def stored_spec(row: JobRow) -> tuple[JobSpec | None, str | None]:
    """The job's spec, or None and why when it no longer passes today's rules (stored by an
    older version, say): one such job must not break every listing."""
    try:
        return row.job_spec(), None
    except ValidationError as exc:
        return None, f"the stored spec no longer loads: {readable_validation_errors(exc.errors())}"


def event_view(row: EventRow) -> JobEvent:
    return JobEvent(
        id=row.id,
        job_id=row.job_id,
        time=datetime.fromtimestamp(row.time, UTC),
        kind=EventKind(row.kind),
        actor=row.actor,
        from_state=JobState(row.from_state) if row.from_state else None,
        to_state=JobState(row.to_state) if row.to_state else None,
        reason=row.reason,
        node=row.node,
        attempt=row.attempt,
    )
