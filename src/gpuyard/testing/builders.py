"""Small builders for scheduler snapshots, so tests read as tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuyard.models import Priority
from gpuyard.scheduler import (
    DEFAULT_POOL,
    Allocation,
    Constraint,
    Limit,
    NodeCapacity,
    PendingJob,
    PoolPolicy,
    Request,
    RunningJob,
    Snapshot,
)
from gpuyard.scheduler.snapshot import QuotaKey

__all__ = ["GiB", "alloc", "job", "node", "running", "snapshot", "whole"]

GiB = 1 << 30


def node(
    name: str,
    *,
    gpus: int = 8,
    cpus: float = 64,
    memory: int = 512 * GiB,
    schedulable: bool = True,
    **labels: str,
) -> NodeCapacity:
    return NodeCapacity(name, gpus, cpus, memory, schedulable, labels)


def job(
    job_id: int,
    *,
    gpus: int = 0,
    nodes: int = 1,
    cpus: float = 1,
    memory: int = 0,
    priority: Priority = Priority.NORMAL,
    owner: str = "alice",
    group: str = "",
    seq: int | None = None,
    version: int = 0,
    max_runtime: float | None = None,
    pool: str = DEFAULT_POOL,
    only: Iterable[str] = (),
    driver: str | None = None,
    alternatives: Iterable[Request] = (),
    min_nodes: int | None = None,
    predicted: float | None = None,
    queued_since: float | None = None,
) -> PendingJob:
    return PendingJob(
        id=job_id,
        version=version,
        priority=priority.rank,
        seq=job_id if seq is None else seq,
        owner=owner,
        request=Request.uniform(nodes=nodes, gpus=gpus, cpus=cpus, memory=memory),
        group=group,
        alternatives=tuple(alternatives),
        constraint=Constraint(pool, frozenset(only), driver),
        max_runtime=max_runtime,
        min_nodes=min_nodes,
        predicted=predicted,
        queued_since=queued_since,
    )


def alloc(node_name: str, gpus: int | Iterable[int] = (), cpus: float = 1) -> Allocation:
    """A share of a node: ``gpus`` is a count (the first ones) or the indices."""
    indices = tuple(range(gpus)) if isinstance(gpus, int) else tuple(gpus)
    return Allocation(node_name, indices, cpus, 0)


def whole(node_name: str, gpus: int = 8) -> Allocation:
    return Allocation(node_name, tuple(range(gpus)), 1, 0, exclusive=True)


def running(
    job_id: int,
    *allocations: Allocation,
    priority: Priority = Priority.NORMAL,
    owner: str = "alice",
    group: str = "",
    version: int = 0,
    started_at: float = 0.0,
    max_runtime: float | None = None,
    last_checkpoint: float | None = None,
    suspending: bool = False,
    preemptible: bool = True,
    min_nodes: int | None = None,
    max_nodes: int | None = None,
    attained: float = 0.0,
    saves_on_notice: bool = False,
    predicted_end: float | None = None,
) -> RunningJob:
    return RunningJob(
        job_id,
        priority.rank,
        owner,
        tuple(allocations),
        group=group,
        version=version,
        started_at=started_at,
        max_runtime=max_runtime,
        last_checkpoint=last_checkpoint,
        suspending=suspending,
        preemptible=preemptible,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        attained=attained,
        saves_on_notice=saves_on_notice,
        predicted_end=predicted_end,
    )


def snapshot(
    nodes: list[NodeCapacity],
    pending: Iterable[PendingJob],
    running_jobs: Iterable[RunningJob] = (),
    now: float = 0.0,
    *,
    pools: Iterable[PoolPolicy] = (),
    quotas: Mapping[QuotaKey, Limit] | None = None,
    shares: Mapping[str, float] | None = None,
) -> Snapshot:
    return Snapshot(
        now=now,
        nodes=tuple(nodes),
        pending=tuple(pending),
        running=tuple(running_jobs),
        pools={p.name: p for p in pools},
        quotas=dict(quotas or {}),
        shares=dict(shares or {}),
    )
