"""Load the scheduler's snapshot from the store (the "load" of load -> decide -> apply).

Queued jobs are read as stored JSON, field by field, rather than validated into ``JobSpec``
models: a pass may read 100,000 of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.launch.topology import members
from gpuyard.models import JobState, NodeState, Priority
from gpuyard.models.job import JobMode, JobType
from gpuyard.models.states import HOLDING, PENDING
from gpuyard.scheduler import (
    DEFAULT_POOL,
    Allocation,
    Constraint,
    Limit,
    NodeCapacity,
    PendingJob,
    PoolPolicy,
    Preemption,
    Request,
    RunningJob,
    Snapshot,
)
from gpuyard.store.tables import JobRow, NodeRow, PoolRow, QuotaRow, UserRow

__all__ = ["allocations_of", "hypothetical", "load_snapshot", "pool_policies", "request_for"]

_PENDING = tuple(sorted(PENDING))


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


def request_for(spec: Mapping[str, Any], resources: Mapping[str, Any] | None = None) -> Request:
    """The request of a stored spec (``model_dump`` of a validated JobSpec), optionally with
    other per-node resources (an alternative spec). Fields added after a job was stored take
    their defaults."""
    resources = resources or spec["resources"]
    batch = spec.get("type") == JobType.BATCH.value
    tensorflow = spec.get("mode") == JobMode.TENSORFLOW.value
    return Request(
        members(
            tasks=len(spec.get("tasks") or ()) if batch else 1,
            nodes=int(spec["nodes"]),
            gpus=int(resources["gpus"]),
            cpus=float(resources["cpus"]),
            memory=int(resources["memory"]),
            parameter_servers=int(spec.get("parameter_servers", 0)) if tensorflow else 0,
        )
    )


def pool_policies(session: Session) -> dict[str, PoolPolicy]:
    return {
        row.name: PoolPolicy(
            name=row.name,
            preemption=Preemption(row.preemption),
            same_zone=row.same_zone,
            notice=row.notice,
            grow_after=row.grow_after,
            slices=tuple(float(x) for x in row.slices or ()),
        )
        for row in session.scalars(select(PoolRow))
    }


class _Constraints:
    """Constraints are keys of the scheduler's caches: hand out one object per distinct one."""

    def __init__(self, node_pools: Mapping[str, str]) -> None:
        self.node_pools = node_pools
        self.known: dict[tuple[str, frozenset[str], str | None], Constraint] = {}

    def of(self, spec: Mapping[str, Any]) -> Constraint:
        names = frozenset(spec.get("node_names") or ())
        pool = spec.get("pool") or DEFAULT_POOL
        if names:  # the pool of the named nodes (the service checked they share one)
            pool = next((self.node_pools[n] for n in sorted(names) if n in self.node_pools), pool)
        key = (pool, names, spec.get("driver_version"))
        found = self.known.get(key)
        if found is None:
            found = self.known[key] = Constraint(*key)
        return found


def load_snapshot(session: Session, now: float) -> Snapshot:
    node_rows = list(session.scalars(select(NodeRow).order_by(NodeRow.name)))
    nodes = tuple(
        NodeCapacity(
            name=row.name,
            gpus=row.gpus,
            cpus=row.cpus,
            memory=row.memory,
            schedulable=row.state is NodeState.READY,
            labels=row.effective_labels(),
        )
        for row in node_rows
    )
    constraints = _Constraints({n.name: n.pool for n in nodes})
    running = tuple(
        _running(row)
        for row in session.execute(
            select(
                JobRow.id,
                JobRow.state,
                JobRow.priority,
                JobRow.owner,
                JobRow.placement,
                JobRow.group_name,
                JobRow.version,
                JobRow.started_at,
                JobRow.created_at,
                JobRow.spec,
                JobRow.last_checkpoint_at,
                JobRow.attained,
                JobRow.listens,
            ).where(JobRow.state.in_(HOLDING))
        )
    )
    pending = tuple(
        _pending(row, constraints)
        for row in session.execute(
            select(
                JobRow.id,
                JobRow.version,
                JobRow.priority,
                JobRow.seq,
                JobRow.owner,
                JobRow.group_name,
                JobRow.spec,
                JobRow.attained,
            )
            .where(JobRow.state.in_(_PENDING))
            .order_by(JobRow.id)
        )
    )
    quotas = {
        (q.kind, q.subject, Priority(q.tier).rank): Limit(nodes=q.nodes, gpus=q.gpus)
        for q in session.scalars(select(QuotaRow))
    }
    shares = {
        name: share
        for name, share in session.execute(select(UserRow.name, UserRow.share))
        if share != 1.0
    }
    return Snapshot(
        now=now,
        nodes=nodes,
        pending=pending,
        running=running,
        pools=pool_policies(session),
        quotas=quotas,
        shares=shares,
    )


def _running(row: Any) -> RunningJob:
    spec = row.spec
    state = JobState(row.state)
    elastic = spec.get("min_nodes") is not None
    return RunningJob(
        id=row.id,
        priority=Priority(row.priority).rank,
        owner=row.owner,
        allocations=allocations_of(row.placement),
        group=row.group_name or "",
        version=row.version,
        started_at=row.started_at or row.created_at,
        max_runtime=spec.get("max_runtime"),
        last_checkpoint=row.last_checkpoint_at,
        # Draining, completing or suspending: its room comes back soon.
        suspending=state not in (JobState.RUNNING, JobState.STARTING),
        # A job being launched is not a victim: let it start first.
        preemptible=state is JobState.RUNNING,
        min_nodes=int(spec["min_nodes"]) if elastic else None,
        max_nodes=int(spec["nodes"]) if elastic else None,
        attained=row.attained or 0.0,
        saves_on_notice=bool(row.listens),
    )


def hypothetical(
    snapshot: Snapshot, spec: Mapping[str, Any], *, owner: str, group: str, seq: int
) -> PendingJob:
    """A job as it would be queued if submitted now (for ``submit --dry-run``): id -1."""
    constraints = _Constraints({n.name: n.pool for n in snapshot.nodes})
    row = SimpleNamespace(
        id=-1,
        version=0,
        priority=spec.get("priority", Priority.NORMAL.value),
        seq=seq,
        owner=owner,
        group_name=group,
        spec=spec,
        attained=0.0,
    )
    return _pending(row, constraints)


def _pending(row: Any, constraints: _Constraints) -> PendingJob:
    spec = row.spec
    return PendingJob(
        id=row.id,
        version=row.version,
        priority=Priority(row.priority).rank,
        seq=row.seq or row.id,
        owner=row.owner,
        request=request_for(spec),
        group=row.group_name or "",
        alternatives=tuple(request_for(spec, alt) for alt in spec.get("alternatives") or ()),
        constraint=constraints.of(spec),
        max_runtime=spec.get("max_runtime"),
        min_nodes=spec.get("min_nodes"),
        attained=row.attained or 0.0,
    )
