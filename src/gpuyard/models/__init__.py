"""Wire and domain types. Imports nothing from the server, so clients can use them."""

from gpuyard.models.job import (
    JobEvent,
    JobMode,
    JobSpec,
    JobType,
    JobView,
    LogChunk,
    Mount,
    Mounts,
    MpiImplementation,
    NodeResources,
    Page,
    Priority,
    Slot,
    SubTask,
    WorkerView,
)
from gpuyard.models.node import NodeState, NodeView
from gpuyard.models.scheduling import Prediction
from gpuyard.models.states import JobState, JobStatus

__all__ = [
    "JobEvent",
    "JobMode",
    "JobSpec",
    "JobState",
    "JobStatus",
    "JobType",
    "JobView",
    "LogChunk",
    "Mount",
    "Mounts",
    "MpiImplementation",
    "NodeResources",
    "NodeState",
    "NodeView",
    "Page",
    "Prediction",
    "Priority",
    "Slot",
    "SubTask",
    "WorkerView",
]
