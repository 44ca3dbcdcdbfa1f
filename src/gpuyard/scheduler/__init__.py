"""The scheduler: pure decisions over a snapshot of the pool. No I/O, no wall clock."""

from gpuyard.scheduler.decide import Decisions, Start, Wait, WaitCode, decide
from gpuyard.scheduler.snapshot import (
    Allocation,
    Member,
    NodeCapacity,
    PendingJob,
    Request,
    RunningJob,
    Snapshot,
)

__all__ = [
    "Allocation",
    "Decisions",
    "Member",
    "NodeCapacity",
    "PendingJob",
    "Request",
    "RunningJob",
    "Snapshot",
    "Start",
    "Wait",
    "WaitCode",
    "decide",
]
