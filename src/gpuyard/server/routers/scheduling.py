"""/api/v1/jobs: suspending a job by hand, and queue predictions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from gpuyard.models import JobSpec, JobView, Prediction, SuspendRequest
from gpuyard.server.deps import JobId, ServicesDep, UserDep

router = APIRouter(prefix="/jobs", tags=["scheduling"])


@router.post("/predict")
def predict(spec: JobSpec, services: ServicesDep, user: UserDep) -> Prediction:
    """When a job with this spec would start if it were submitted now; nothing is stored."""
    return services.scheduling.predict(spec, owner=user)


@router.post("/{job_id}/suspend")
def suspend(
    job_id: JobId,
    services: ServicesDep,
    user: UserDep,
    request: Annotated[SuspendRequest | None, Body()] = None,
) -> JobView:
    """Checkpoint, exit and requeue at the original position (docs/preemption.md); with
    `{"hold": true}`, stay held once suspended until released (a pause; docs/jobs.md)."""
    hold = request.hold if request is not None else False
    return services.scheduling.suspend(job_id, actor=user, hold=hold)


@router.get(
    "/{job_id}/prediction",
    responses={409: {"description": "The job is not queued: it has no start to predict."}},
)
def prediction(job_id: JobId, services: ServicesDep, user: UserDep) -> Prediction:
    """When a queued job should start, and behind which jobs."""
    return services.scheduling.prediction(job_id, actor=user)
