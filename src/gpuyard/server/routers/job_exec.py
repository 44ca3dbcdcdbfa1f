"""/api/v1/jobs/{id}/exec: thin routes over ExecService (``gpuyard exec``, reference 000's jmt)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from gpuyard.models import ExecKill, ExecOutcome, ExecRun, ExecStatus, ExecStop
from gpuyard.server.deps import JobId, ServicesDep, UserDep

router = APIRouter(prefix="/jobs/{job_id}/exec", tags=["exec"])


@router.get("")
def status(job_id: JobId, services: ServicesDep, user: UserDep) -> ExecStatus:
    """The job's state and every worker of its current attempt, with its supervisor's pid."""
    return services.execs.status(job_id, actor=user)


@router.post("/stop")
def stop(
    job_id: JobId,
    services: ServicesDep,
    user: UserDep,
    request: Annotated[ExecStop | None, Body()] = None,
) -> ExecOutcome:
    """Hold a running job (its workers stop, its nodes stay its own), or stop what `run`
    started in a held one."""
    hold = request.hold if request is not None else None
    return services.execs.stop(job_id, actor=user, hold=hold)


@router.post("/start")
def start(job_id: JobId, services: ServicesDep, user: UserDep) -> ExecOutcome:
    """Run a held job's command again, as its next attempt on the same nodes."""
    return services.execs.start(job_id, actor=user)


@router.post("/run")
def run(job_id: JobId, request: ExecRun, services: ServicesDep, user: UserDep) -> ExecOutcome:
    """Run a command (or the job, or the node check) on each node of a held job; its output
    is in the logs of the workers the answer names."""
    return services.execs.run(job_id, request, actor=user)


@router.post("/kill")
def kill(job_id: JobId, request: ExecKill, services: ServicesDep, user: UserDep) -> ExecOutcome:
    """SIGKILL these workers of a held job."""
    return services.execs.kill(job_id, request.ranks, actor=user)
