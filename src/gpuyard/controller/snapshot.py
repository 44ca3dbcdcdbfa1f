"""Load the scheduler's snapshot from the store (the "load" of load -> decide -> apply)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.launch.topology import stored_request
from gpuyard.models import JobState, NodeState, Priority
from gpuyard.scheduler import (
    Allocation,
    NodeCapacity,
    PendingJob,
    RunningJob,
    Snapshot,
)
from gpuyard.server.db.tables import JobRow, NodeRow

__all__ = ["allocations_of", "load_snapshot"]

_HOLDING = [s.value for s in JobState if s.holds_resources()]


def allocations_of(placement: list[dict[str, Any]] | None) -> tuple[Allocation, ...]:
    return tuple(
        Allocation(
            node=str(slot["node"]),
            gpus=tuple(int(g) for g in slot.get("gpus", ()) or ()),
            cpus=float(slot.get("cpus", 0.0)),
            memory=int(slot.get("memory", 0)),
            exclusive=bool(slot.get("exclusive", False)),
        )
        for slot in placement or []
    )


def load_snapshot(session: Session, now: float) -> Snapshot:
    nodes = tuple(
        NodeCapacity(
            name=row.name,
            gpus=row.gpus,
            cpus=row.cpus,
            memory=row.memory,
            schedulable=row.state == NodeState.READY.value,
            labels={str(k): str(v) for k, v in row.labels.items()},
        )
        for row in session.scalars(select(NodeRow).order_by(NodeRow.name))
    )
    running = tuple(
        RunningJob(
            id=job_id,
            priority=Priority(priority).rank,
            owner=owner,
            allocations=allocations_of(placement),
        )
        for job_id, priority, owner, placement in session.execute(
            select(JobRow.id, JobRow.priority, JobRow.owner, JobRow.placement).where(
                JobRow.state.in_(_HOLDING)
            )
        )
    )
    pending = tuple(
        PendingJob(
            id=job_id,
            version=version,
            priority=Priority(priority).rank,
            seq=job_id,
            owner=owner,
            request=stored_request(spec),
        )
        for job_id, version, priority, owner, spec in session.execute(
            select(JobRow.id, JobRow.version, JobRow.priority, JobRow.owner, JobRow.spec)
            .where(JobRow.state == JobState.QUEUED.value)
            .order_by(JobRow.id)
        )
    )
    return Snapshot(now=now, nodes=nodes, pending=pending, running=running)
