"""Nodes as the API shows them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gpuyard.models.health import Finding

__all__ = [
    "CordonRequest",
    "IsolationMode",
    "KillMethod",
    "Network",
    "NodeIsolation",
    "NodeState",
    "NodeView",
]


class Network(StrEnum):
    """The fabric between a pool's nodes (docs/distributed.md): it decides the NCCL variables."""

    NONE = "none"
    ROCE = "roce"
    IB = "ib"


class NodeState(StrEnum):
    READY = "ready"
    """Schedulable."""
    CORDONED = "cordoned"
    """Kept out of scheduling by an admin or a failed check; running jobs continue."""
    GONE = "gone"
    """No executor presents it any more; kept so that running jobs can still be adopted."""


class IsolationMode(StrEnum):
    """How a node's workers are kept apart (docs/security.md, "Limits")."""

    CGROUP_V2 = "cgroup-v2"
    CGROUP_V1 = "cgroup-v1"
    NONE = "none"


class KillMethod(StrEnum):
    """How a worker is ended as a whole."""

    CGROUP_KILL = "cgroup.kill"
    """v2, Linux 5.14: the kernel kills every process of the cgroup at once."""
    FREEZER = "freezer"
    """Freeze the cgroup, SIGKILL each member, thaw, until it is empty."""
    ENVIRONMENT = "environment"
    """No cgroup: the processes that kept the worker's environment; one that cleared it
    escapes."""


CONTROLLERS = ("memory", "pids", "cpu")
"""The limits a worker's cgroup can enforce, each reported enforced or not."""
_PREFIX = "isolation."


class NodeIsolation(BaseModel):
    """What a node enforces for each worker, exactly: carried in the node's labels
    (``isolation``, ``isolation.enforced``, ``isolation.kill``, ``isolation.pids-ceiling``,
    ``isolation.memory-ceiling``; ``enforced`` as ``memory+pids+cpu``) so that it travels with
    the node from any executor."""

    mode: IsolationMode
    enforced: list[str] = Field(
        default_factory=list, description="Controllers that limit each worker: memory, pids, cpu."
    )
    kill: KillMethod = KillMethod.ENVIRONMENT
    pids_ceiling: int = Field(0, description="Processes of all workers together; 0: none.")
    memory_ceiling: int = Field(0, description="Memory bytes of all workers together; 0: none.")

    @property
    def not_enforced(self) -> list[str]:
        return [c for c in CONTROLLERS if c not in self.enforced]

    def to_labels(self) -> dict[str, str]:
        return {
            "isolation": self.mode.value,
            # "+", not ",": labels become Slurm features, a comma-separated list
            f"{_PREFIX}enforced": "+".join(self.enforced),
            f"{_PREFIX}kill": self.kill.value,
            f"{_PREFIX}pids-ceiling": str(self.pids_ceiling),
            f"{_PREFIX}memory-ceiling": str(self.memory_ceiling),
        }

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> NodeIsolation | None:
        """What the labels say, or None where they do not say it (another executor)."""
        try:
            mode = IsolationMode(labels.get("isolation", ""))
            kill = KillMethod(labels.get(f"{_PREFIX}kill", KillMethod.ENVIRONMENT.value))
            pids = int(labels.get(f"{_PREFIX}pids-ceiling", "0"))
            memory = int(labels.get(f"{_PREFIX}memory-ceiling", "0"))
        except ValueError:
            return None
        words = labels.get(f"{_PREFIX}enforced", "").replace(",", "+").split("+")
        enforced = [c for c in CONTROLLERS if c in words]
        return cls(
            mode=mode, enforced=enforced, kill=kill, pids_ceiling=pids, memory_ceiling=memory
        )

    def describe(self) -> str:
        """One line: ``cgroup-v2: memory, pids enforced; cpu NOT enforced; kill by …``."""
        parts = [f"{', '.join(self.enforced)} enforced"] if self.enforced else []
        if self.not_enforced:
            parts.append(f"{', '.join(self.not_enforced)} NOT enforced")
        parts.append(f"whole-worker kill by {self.kill.value}")
        if self.pids_ceiling:
            parts.append(f"all workers at most {self.pids_ceiling} processes")
        if self.memory_ceiling:
            parts.append(f"all workers at most {self.memory_ceiling} bytes")
        return f"{self.mode.value}: " + "; ".join(parts)


class NodeView(BaseModel):
    name: str
    address: str
    state: NodeState
    gpus: int
    gpus_used: int
    cpus: float
    cpus_used: float
    memory: int
    memory_used: int
    gpu_model: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    jobs: list[int] = Field(
        default_factory=list,
        description="Ids of the jobs placed on it that the caller may see (docs/security.md).",
    )
    hidden_jobs: int = Field(
        0, description="How many other jobs are placed on it: counted, never named."
    )
    updated_at: datetime | None = None
    cordon_reason: str | None = Field(None, description="Why it is cordoned, while it is.")
    cordoned_by: str | None = Field(
        None,
        description="Who cordoned it: user:NAME, check:job N for a failed node check, or "
        "inspection for a critical finding of the periodic node inspection.",
    )
    cordoned_at: datetime | None = None
    health: list[Finding] = Field(
        default_factory=list,
        description="What the latest inspection found, one entry per probe (and GPU); "
        "empty until the node is first inspected (docs/node-health.md).",
    )
    inspected_at: datetime | None = Field(None, description="When the latest inspection ran.")
    isolation: NodeIsolation | None = Field(
        None,
        description="What the node enforces for each worker (memory, pids, cpu, how it kills "
        "a worker whole) and its ceilings; None where its executor does not say.",
    )


class CordonRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        min_length=1, max_length=500, description="Why: shown in `gpuyard nodes` until uncordoned."
    )
