"""Nodes as the API shows them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gpuyard.models.health import Finding

__all__ = ["CordonRequest", "Network", "NodeState", "NodeView"]


class Network(StrEnum):
    """The fabric between a pool's nodes (reference 000): it decides the NCCL variables."""

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


class CordonRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        min_length=1, max_length=500, description="Why: shown in `gpuyard nodes` until uncordoned."
    )
