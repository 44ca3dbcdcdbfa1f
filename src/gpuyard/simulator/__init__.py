"""Trace replay: real cluster traces through gpuyard's scheduler, on a virtual clock.

- :mod:`~gpuyard.simulator.trace` and :mod:`~gpuyard.simulator.cluster`: the input schemas;
- :mod:`~gpuyard.simulator.engine`: the event-driven engine, one partition at a time;
- :mod:`~gpuyard.simulator.policy`: the engine <-> policy seam (views, decisions);
- :mod:`~gpuyard.simulator.reference`: the artifact's FIFO/SJF, a check of the engine;
- :mod:`~gpuyard.simulator.gpuyard_policy`: the production policy, ``scheduler.decide()``;
- :mod:`~gpuyard.simulator.metrics`, :mod:`~gpuyard.simulator.report`: figures and files;
- :mod:`~gpuyard.simulator.runner`, :mod:`~gpuyard.simulator.study`: whole replays.

See ``docs/simulator.md``.
"""

from gpuyard.simulator.cluster import NodeClass, Partition, load_cluster
from gpuyard.simulator.engine import Engine, Overhead, PartitionResult
from gpuyard.simulator.policy import (
    Decision,
    JobStatus,
    Policy,
    PolicyContext,
    SimJob,
    SimulationError,
    Slot,
    StartJob,
    View,
)
from gpuyard.simulator.trace import PRESETS, LoadReport, TraceJob, TraceSchema, load_trace

__all__ = [
    "PRESETS",
    "Decision",
    "Engine",
    "JobStatus",
    "LoadReport",
    "NodeClass",
    "Overhead",
    "Partition",
    "PartitionResult",
    "Policy",
    "PolicyContext",
    "SimJob",
    "SimulationError",
    "Slot",
    "StartJob",
    "TraceJob",
    "TraceSchema",
    "View",
    "load_cluster",
    "load_trace",
]
