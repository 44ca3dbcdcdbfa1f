"""The scheduler's input: an immutable picture of the pool at one instant.

Plain frozen dataclasses, no pydantic and no ORM, so that building a snapshot of 10,000 nodes
and 100,000 jobs stays cheap and the same types serve the server, the trace simulator and queue
prediction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "Allocation",
    "Member",
    "NodeCapacity",
    "PendingJob",
    "Request",
    "RunningJob",
    "Snapshot",
]


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    name: str
    gpus: int
    cpus: float
    memory: int
    schedulable: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Member:
    """What one worker of a job needs from the node it lands on."""

    gpus: int = 0
    cpus: float = 1.0
    memory: int = 0
    whole_node: bool = False
    """Take a whole free node (and hold it exclusively), as multi-node jobs do."""


@dataclass(frozen=True, slots=True)
class Request:
    """Everything a job needs at once: one member per worker, placed all or nothing."""

    members: tuple[Member, ...]

    @classmethod
    def uniform(cls, nodes: int = 1, gpus: int = 0, cpus: float = 1.0, memory: int = 0) -> Request:
        """``nodes`` identical workers; more than one means whole nodes."""
        return cls((Member(gpus, cpus, memory, whole_node=nodes > 1),) * nodes)

    @property
    def gpus(self) -> int:
        return sum(m.gpus for m in self.members)

    @property
    def nodes(self) -> int:
        return len(self.members)


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: int
    version: int
    priority: int
    """Tier rank; higher goes first."""
    seq: int
    """Original submission order; kept across suspensions."""
    owner: str
    request: Request


@dataclass(frozen=True, slots=True)
class Allocation:
    """One worker's use of one node."""

    node: str
    gpus: tuple[int, ...] = ()
    cpus: float = 0.0
    memory: int = 0
    exclusive: bool = False
    """The job holds the whole node, whatever it uses of it."""


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: int
    priority: int
    owner: str
    allocations: tuple[Allocation, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[NodeCapacity, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
