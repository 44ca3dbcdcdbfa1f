"""Small builders for scheduler snapshots, so tests read as tables."""

from __future__ import annotations

from gpuyard.models import Priority
from gpuyard.scheduler import Allocation, NodeCapacity, PendingJob, Request, RunningJob, Snapshot

__all__ = ["job", "node", "running", "snapshot"]

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
    seq: int | None = None,
    version: int = 0,
) -> PendingJob:
    return PendingJob(
        id=job_id,
        version=version,
        priority=priority.rank,
        seq=job_id if seq is None else seq,
        owner=owner,
        request=Request.uniform(nodes=nodes, gpus=gpus, cpus=cpus, memory=memory),
    )


def running(
    job_id: int,
    *allocations: Allocation,
    priority: Priority = Priority.NORMAL,
    owner: str = "alice",
) -> RunningJob:
    return RunningJob(job_id, priority.rank, owner, tuple(allocations))


def snapshot(
    nodes: list[NodeCapacity],
    pending: list[PendingJob],
    running_jobs: tuple[RunningJob, ...] | list[RunningJob] = (),
    now: float = 0.0,
) -> Snapshot:
    return Snapshot(
        now=now, nodes=tuple(nodes), pending=tuple(pending), running=tuple(running_jobs)
    )
