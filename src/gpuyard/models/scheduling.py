"""What the API says about scheduling: queue predictions; what a suspension by hand asks."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

__all__ = ["Prediction", "SuspendRequest"]


class Prediction(BaseModel):
    """When a queued (or hypothetical) job should start, from the scheduler run forward over
    the queue with every job's max runtime as its run time (docs/scheduling.md)."""

    now: bool = Field(description="It would start right away.")
    start_at: datetime | None = Field(
        None,
        description="When it should start; none when that depends on jobs without a max "
        "runtime or a predicted run time.",
    )
    earliest: datetime | None = Field(
        None,
        description="The range of its start, when it waits on predicted run times "
        "(docs/scheduling.md#predicted-run-times): the earliest it may start.",
    )
    latest: datetime | None = Field(None, description="The latest it should start by.")
    run_time: str | None = Field(
        None,
        description="How long it is predicted to run, its range and where that comes from "
        "('predicted 2h10m (1h05m–4h20m) from 14 earlier jobs of ada named resnet*-*'); none "
        "before the pool has history to predict it from.",
    )
    ahead: list[int] = Field(
        default_factory=list,
        description="Queued jobs that should start before it, of those the caller may see.",
    )
    hidden_ahead: int = Field(
        0, description="How many other jobs should start before it: counted, never named."
    )
    waits_for: list[int] = Field(
        default_factory=list,
        description="Running jobs whose end it waits for, of those the caller may see.",
    )
    hidden_waits_for: int = Field(
        0, description="How many other running jobs it waits for: counted, never named."
    )
    reason: str = Field(description="The prediction in words.")


class SuspendRequest(BaseModel):
    """The optional body of ``POST /jobs/{id}/suspend``."""

    hold: bool = Field(
        False,
        description="Keep the job held once suspended: it is not placed again until released "
        "(`POST /jobs/{id}/release`, `gpuyard resume`).",
    )
