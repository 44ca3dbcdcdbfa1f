"""Wire and domain types. Imports nothing from the server, so clients can use them."""

from gpuyard.models.job import (
    JobEvent,
    JobMode,
    JobSpec,
    JobView,
    LogChunk,
    NodeResources,
    Page,
    Priority,
    Slot,
    WorkerView,
)
from gpuyard.models.node import NodeState, NodeView
from gpuyard.models.states import JobState, JobStatus

__all__ = [
    "JobEvent",
    "JobMode",
    "JobSpec",
    "JobState",
    "JobStatus",
    "JobView",
    "LogChunk",
    "NodeResources",
    "NodeState",
    "NodeView",
    "Page",
    "Priority",
    "Slot",
    "WorkerView",
]
