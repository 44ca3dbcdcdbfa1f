"""The scheduler: pure decisions over a snapshot of the pool. No I/O, no wall clock.

:func:`decide` is one cycle; :func:`forecast` replays cycles forward to tell when each queued
job should start; :func:`frozen_heap` is for the caller that runs them on a large snapshot
(it keeps the garbage collector off the snapshot for the length of a pass).
"""

from gpuyard.scheduler.collector import frozen_heap
from gpuyard.scheduler.decide import Decisions, Grow, Preempt, Start, Wait, WaitCode, decide
from gpuyard.scheduler.predict import Budget, Forecast, forecast, predict
from gpuyard.scheduler.snapshot import (
    COPY_RATE,
    DEFAULT_POOL,
    TIME_SHARING_AGE_HALFLIFE,
    TIME_SHARING_MIN_RUN,
    TIME_SHARING_SLICES,
    Allocation,
    Constraint,
    DataNeed,
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
    "COPY_RATE",
    "DEFAULT_POOL",
    "TIME_SHARING_AGE_HALFLIFE",
    "TIME_SHARING_MIN_RUN",
    "TIME_SHARING_SLICES",
    "Allocation",
    "Budget",
    "Constraint",
    "DataNeed",
    "Decisions",
    "Forecast",
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
    "forecast",
    "frozen_heap",
    "predict",
]
