"""A job's checkpoints as the checkpoint service keeps them (docs/checkpoints.md): the wire
types of ``GET /api/v1/jobs/{id}/checkpoints`` and ``POST .../checkpoints/resume``."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CheckpointList", "CheckpointPlace", "CheckpointView", "ResumeFrom"]

MAX_LISTED = 1000
"""Steps a listing shows at most (the newest)."""


class CheckpointPlace(StrEnum):
    STORAGE = "storage"
    """Every rank's part is on the job's storage: any node can resume from it."""
    MEMORY = "memory"
    """Every rank's part is in its node's memory: a restart on the same nodes loads it."""


class CheckpointView(BaseModel):
    """One complete step: every rank's part is held in at least one place."""

    model_config = ConfigDict(frozen=True)

    step: int
    time: float = Field(description="When its newest part was saved (seconds since the epoch).")
    size: int = Field(description="Bytes of its parts on storage (0 while only in memory).")
    ranks: int = Field(description="How many ranks' parts make it up.")
    held: list[CheckpointPlace]
    nodes: list[str] = Field(default_factory=list, description="Nodes whose memory holds it.")
    pinned: bool = False


class CheckpointList(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: int
    checkpoints: list[CheckpointView] = Field(description="Oldest first.")
    resume_step: int | None = Field(
        None, description="The step its next attempt resumes from, when one was chosen."
    )
    partial: list[int] = Field(
        default_factory=list,
        description="Steps newer than the newest complete one that some rank's part of is "
        "missing (being saved, or cut short): never resumed from.",
    )


class ResumeFrom(BaseModel):
    """`gpuyard resume JOB --from STEP|latest`."""

    model_config = ConfigDict(extra="forbid")

    step: int | None = Field(
        None, ge=0, le=2**62, description="A complete step of the job; null: the newest."
    )
