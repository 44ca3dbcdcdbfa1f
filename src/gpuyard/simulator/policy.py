"""The seam between the engine and a scheduling policy.

At each decision point (a submission, a completion, or a wake-up the policy asked for; not
while the queue is empty, unless the policy asked for that wake-up) the engine calls
``policy.decide(view)`` with a read-only :class:`View` of one partition and
applies the returned :class:`Decision`: first the preemptions, then the starts (so a policy may
preempt to make room and start into that room in one decision). A bad decision (a start that
does not fit, a job that is not pending) raises :class:`SimulationError`: it is a policy bug.

What a policy sees is what a real scheduler knows: the jobs' submit time, request, owner,
group, priority, how long they have run and waited, and everything about jobs that already
finished. A job's run time in the trace is not in :class:`SimJob`; the engine hands it only to
policies built with ``oracle=True`` (the reference SJF), through :class:`PolicyContext`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from gpuyard.errors import GpuyardError
from gpuyard.simulator.cluster import Node, Partition

__all__ = [
    "Decision",
    "JobStatus",
    "Policy",
    "PolicyContext",
    "SimJob",
    "SimulationError",
    "Slot",
    "StartJob",
    "View",
]


class SimulationError(GpuyardError):
    """A policy asked for something the simulated cluster cannot do."""


class JobStatus(StrEnum):
    FUTURE = "future"
    """Not submitted yet."""
    PENDING = "pending"
    """In the queue (first time, or requeued after a preemption)."""
    RUNNING = "running"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Slot:
    """``gpus`` GPUs of node number ``node`` (an index into ``View.nodes``)."""

    node: int
    gpus: int


@dataclass(eq=False, slots=True)
class SimJob:
    """A job's public facts and its simulated history. No run time: see the module doc."""

    index: int
    """Position in the partition's submit order (ties: trace order); the queue position a
    preempted job keeps."""
    job_id: str
    user: str
    group: str
    submit: float
    gpus: int
    nodes: int | None
    priority: int
    status: JobStatus = JobStatus.FUTURE
    placement: tuple[Slot, ...] = ()
    first_start: float | None = None
    started_at: float | None = None
    """Start of the current run (None unless running)."""
    end: float | None = None
    queued: float = 0.0
    """Seconds spent pending, up to ``pending_since`` (add ``now - pending_since`` if pending)."""
    pending_since: float = 0.0
    ran: float = 0.0
    """Seconds run in finished runs (the current run not included)."""
    preemptions: int = 0

    def attained(self, now: float) -> float:
        """Seconds run so far, the current run included."""
        if self.started_at is None:
            return self.ran
        return self.ran + now - self.started_at

    def attained_gpu_seconds(self, now: float) -> float:
        return self.attained(now) * self.gpus

    def queue_time(self, now: float) -> float:
        if self.status is JobStatus.PENDING:
            return self.queued + now - self.pending_since
        return self.queued


@dataclass(slots=True)
class View:
    """One partition at one instant. Read-only, and valid only during the call."""

    now: float
    nodes: tuple[Node, ...]
    free: Sequence[int]
    """Free GPUs per node, in ``nodes`` order."""
    pending: Mapping[int, SimJob]
    """Pending jobs by index, in the order they (re-)entered the queue."""
    running: Mapping[int, SimJob]
    submitted: Sequence[SimJob]
    """Jobs submitted since the previous call."""
    finished: Sequence[SimJob]
    """Jobs that finished since the previous call."""


@dataclass(frozen=True, slots=True)
class StartJob:
    job: int
    """The job's index."""
    placement: tuple[Slot, ...]


@dataclass(slots=True)
class Decision:
    starts: list[StartJob] = field(default_factory=list)
    preempts: list[int] = field(default_factory=list)
    """Indices of running jobs to suspend: their GPUs free now, they requeue at their
    original position and pay the preemption overhead when they run again."""
    wake_at: float | None = None
    """Call me again at this time even if nothing happens (must be later than now)."""


@dataclass(frozen=True, slots=True)
class PolicyContext:
    partition: Partition
    durations: Sequence[float] | None = None
    """Run time of each job by index; only for policies registered with ``oracle=True``."""
    overhead_of: Callable[[int], float] | None = None
    """Seconds of work a preemption adds to a job of this many GPUs (the engine's
    overhead): what an oracle needs to know a preempted job's remaining time."""
    forecast_every: int = 0
    """For the report: a policy that predicts starts predicts one for every job whose index
    is a multiple of this, when it is submitted (0: none)."""


class Policy(Protocol):
    def decide(self, view: View) -> Decision: ...
