"""The scheduler: pure decisions over a snapshot of the pool. No I/O, no wall clock."""

from gpuyard.scheduler.decide import Decisions, Grow, Preempt, Start, Wait, WaitCode, decide
from gpuyard.scheduler.snapshot import (
    DEFAULT_POOL,
    TIME_SHARING_SLICES,
    Allocation,
    Constraint,
    Limit,
    Member,
    NodeCapacity,
    PendingJob,
    PoolPolicy,
    Preemption,
    Request,
    RunningJob,
    Snapshot,
)

__all__ = [
    "DEFAULT_POOL",
    "TIME_SHARING_SLICES",
    "Allocation",
    "Constraint",
    "Decisions",
    "Grow",
    "Limit",
    "Member",
    "NodeCapacity",
    "PendingJob",
    "PoolPolicy",
    "Preempt",
    "Preemption",
    "Request",
    "RunningJob",
    "Snapshot",
    "Start",
    "Wait",
    "WaitCode",
    "decide",
]
