"""/api/v1/jobs: thin routes over JobService and LogService.

``/{job_id:int}`` where a word sits at the same place (/jobs/stop, /jobs/batch, …): the word
is not a job id, so ``PATCH /jobs/stop`` is a 405 that lists POST, not a 422 about job_id.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import InvalidSpec
from gpuyard.models import (
    BulkResult,
    FaultEntry,
    JobBatch,
    JobChange,
    JobEvent,
    JobIds,
    JobSpec,
    JobStatus,
    JobView,
    LogChunk,
    Page,
    SignalRequest,
    SubmittedJobs,
)
from gpuyard.models.checkpoints import CheckpointList, ResumeFrom
from gpuyard.models.job_query import MAX_PAGE, JobQuery
from gpuyard.models.service import ServiceView
from gpuyard.models.slurm import SlurmStepView
from gpuyard.models.usage import JobUsage, Window
from gpuyard.server.deps import (
    INT64_MAX,
    MAX_ID,
    AuthorizationDep,
    JobId,
    Services,
    ServicesDep,
    UserDep,
)
from gpuyard.services.datasets import names_datasets
from gpuyard.services.images import needs_registry

router = APIRouter(prefix="/jobs", tags=["jobs"])


async def _enqueue(services: Services, specs: list[JobSpec], user: str) -> list[JobView]:
    """Awaited, not run in a worker thread: the store's writer thread does the writing, and
    submissions that arrive together share one transaction. Jobs with an image are queued
    from a thread: their digests are asked of the registry first; so are jobs that mount a
    dataset of the catalogue, looked up in the database."""
    if needs_registry(specs) or names_datasets(specs):
        future = await run_in_threadpool(services.jobs.enqueue, specs, owner=user)
    else:
        future = services.jobs.enqueue(specs, owner=user)
    return await asyncio.wrap_future(future)


@router.post("", status_code=201)
async def submit(spec: JobSpec, services: ServicesDep, user: UserDep) -> JobView:
    return (await _enqueue(services, [spec], user))[0]


@router.post("/batch", status_code=201)
async def submit_batch(batch: JobBatch, services: ServicesDep, user: UserDep) -> SubmittedJobs:
    """Submit many jobs in one request, all or none (a job array): the first refused job
    refuses them all, naming its index, and nothing is stored."""
    views = await _enqueue(services, list(batch.jobs), user)
    return SubmittedJobs(ids=[v.id for v in views])


@router.post("/stop")
def stop_many(ids: JobIds, services: ServicesDep, user: UserDep) -> BulkResult:
    """Stop many jobs in one request; those that cannot be stopped are listed with why."""
    return services.jobs.stop_many(ids.ids, actor=user)


@router.post("/hold")
def hold_many(ids: JobIds, services: ServicesDep, user: UserDep) -> BulkResult:
    """Hold many waiting jobs in one request; those that cannot be held are listed with why."""
    return services.jobs.hold_many(ids.ids, actor=user, held=True)


@router.post("/release")
def release_many(ids: JobIds, services: ServicesDep, user: UserDep) -> BulkResult:
    """Release many held jobs in one request; those that cannot be are listed with why."""
    return services.jobs.hold_many(ids.ids, actor=user, held=False)


@router.post("/delete")
def delete_many(ids: JobIds, services: ServicesDep, user: UserDep) -> BulkResult:
    """Delete many ended jobs in one request; those that cannot be are listed with why."""
    return services.jobs.delete_many(ids.ids, actor=user)


@router.get("")
def list_jobs(
    services: ServicesDep,
    user: UserDep,
    status: Annotated[list[str] | None, Query(description="queued, running, error, …")] = None,
    name: Annotated[str | None, Query(description="Substring of the job name.")] = None,
    owner: str | None = None,
    id: Annotated[
        list[JobId] | None, Query(max_length=1000, description="Only these jobs.")
    ] = None,
    array: Annotated[JobId | None, Query(description="The tasks of this job array.")] = None,
    active_after: Annotated[
        float | None,
        Query(ge=0, allow_inf_nan=False, description="Only jobs not ended before this Unix time."),
    ] = None,
    created_before: Annotated[
        float | None,
        Query(ge=0, allow_inf_nan=False, description="Only jobs submitted by this Unix time."),
    ] = None,
    offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> Page[JobView]:
    try:
        statuses = [JobStatus.parse(s) for s in status or []]
    except ValueError as exc:
        raise InvalidSpec(str(exc)) from None
    wanted = JobQuery(
        statuses=tuple(statuses),
        name=name or "",
        owner=owner or "",
        ids=tuple(id or ()),
        array=array,
        active_after=active_after,
        created_before=created_before,
        offset=offset,
        limit=limit,
    )
    return services.jobs.list_jobs(wanted, actor=user)


@router.get("/{job_id:int}")
def get_job(job_id: JobId, services: ServicesDep, user: UserDep) -> JobView:
    return services.jobs.get(job_id, actor=user)


@router.patch("/{job_id:int}")
def change(job_id: JobId, change: JobChange, services: ServicesDep, user: UserDep) -> JobView:
    """Change a queued or suspended job's priority, and/or the runtime limit of a job that
    has not ended (its owner, an admin, or its group with read-write access)."""
    view = None
    # The priority first: it is refused more often (by state, tier, limit), and then nothing
    # has changed.
    if change.priority is not None:
        view = services.jobs.change_priority(job_id, change.priority, actor=user)
    if change.max_runtime is not None:
        view = services.jobs.change_runtime(job_id, change.max_runtime, actor=user)
    assert view is not None  # JobChange asks for at least one
    return view


@router.post("/{job_id}/stop")
def stop(job_id: JobId, services: ServicesDep, user: UserDep) -> JobView:
    return services.jobs.stop(job_id, actor=user)


@router.post("/{job_id}/signal")
def signal_job(
    job_id: JobId, request: SignalRequest, services: ServicesDep, user: UserDep
) -> JobView:
    """Send a signal to a running job's steps (srun) or its batch shell (scancel --signal)."""
    return services.jobs.signal(job_id, request.signal, steps=request.steps, actor=user)


@router.delete("/{job_id:int}", status_code=204)
def delete(job_id: JobId, services: ServicesDep, user: UserDep) -> Response:
    services.jobs.delete(job_id, actor=user)
    return Response(status_code=204)


@router.post("/{job_id}/clone", status_code=201)
def clone(
    job_id: JobId,
    services: ServicesDep,
    user: UserDep,
    overrides: Annotated[
        dict[str, Any] | None, Body(description="Spec fields to change in the copy.")
    ] = None,
) -> JobView:
    return services.jobs.clone(job_id, actor=user, overrides=overrides)


@router.get("/{job_id}/events")
def events(
    job_id: JobId,
    services: ServicesDep,
    user: UserDep,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Only events with a larger id.")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
) -> list[JobEvent]:
    return services.jobs.events(job_id, actor=user, after=after, limit=limit)


@router.get("/{job_id}/service")
def service(job_id: JobId, services: ServicesDep, user: UserDep) -> ServiceView:
    """Where an interactive job serves (``/proxy/<id>/``, docs/interactive.md) and whether it
    is ready: a running service is ready once it answers a probe."""
    return services.interactive.view(job_id, actor=user)


@router.get("/{job_id}/checkpoints")
def checkpoints(job_id: JobId, services: ServicesDep, user: UserDep) -> CheckpointList:
    """The job's complete checkpoints saved through the checkpoint service (step, time, size,
    where each is held) and the step its next attempt resumes from (docs/checkpoints.md)."""
    return services.checkpoints.listing(job_id, actor=user)


@router.post("/{job_id}/checkpoints/resume")
def resume_from(
    job_id: JobId, wanted: ResumeFrom, services: ServicesDep, user: UserDep
) -> CheckpointList:
    """Resume a queued, held or suspended job from a chosen complete step (null: the newest),
    releasing it if it was held."""
    return services.checkpoints.resume_from(job_id, wanted.step, actor=user)


@router.put("/{job_id}/checkpoints/{step}/pin")
def pin_checkpoint(
    job_id: JobId,
    step: Annotated[int, PathParam(ge=0, le=2**62)],
    services: ServicesDep,
    user: UserDep,
) -> CheckpointList:
    """Keep a complete step on storage whatever the retention (docs/checkpoints.md)."""
    return services.checkpoints.pin(job_id, step, actor=user, pinned=True)


@router.delete("/{job_id}/checkpoints/{step}/pin")
def unpin_checkpoint(
    job_id: JobId,
    step: Annotated[int, PathParam(ge=0, le=2**62)],
    services: ServicesDep,
    user: UserDep,
) -> CheckpointList:
    """Let a pinned step go with the retention again."""
    return services.checkpoints.pin(job_id, step, actor=user, pinned=False)


@router.get("/{job_id}/slurm-steps")
def slurm_steps(job_id: JobId, services: ServicesDep, user: UserDep) -> list[SlurmStepView]:
    """The srun steps of a Slurm batch job's current attempt (sacct's step rows)."""
    return services.slurm_steps.steps(job_id, actor=user)


@router.post("/{job_id}/hold")
def hold(job_id: JobId, services: ServicesDep, user: UserDep) -> JobView:
    """Keep a waiting (or suspending) job from starting until it is released; a running one
    is paused with `POST /jobs/{id}/suspend` and `{"hold": true}`."""
    return services.jobs.hold(job_id, actor=user, held=True)


@router.post("/{job_id}/release")
def release(job_id: JobId, services: ServicesDep, user: UserDep) -> JobView:
    """Let a held job start again when its turn comes."""
    return services.jobs.hold(job_id, actor=user, held=False)


@router.get("/{job_id}/faults")
def faults(job_id: JobId, services: ServicesDep, user: UserDep) -> list[FaultEntry]:
    """The job's fault-tolerance log: each fault, its evidence, the action, the outcome."""
    return services.jobs.faults(job_id, actor=user)


@router.get("/{job_id}/usage")
def usage(
    job_id: JobId,
    services: ServicesDep,
    user: UserDep,
    window: Annotated[
        Window, Query(description="realtime (10 s samples), 1h, 1d or 7d (averages).")
    ] = Window.REALTIME,
) -> JobUsage:
    """CPU, memory and GPU use of each of the job's workers over a window
    (docs/monitoring.md)."""
    return services.usage.job(job_id, actor=user, window=window)


@router.get(
    "/{job_id}/logs",
    response_model=None,
    responses={
        200: {
            "model": LogChunk,
            "description": "A slice of the log; with follow, the log as it grows (text/plain).",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
def logs(
    job_id: JobId,
    services: ServicesDep,
    user: UserDep,
    authorization: AuthorizationDep,
    worker: Annotated[int, Query(ge=0, le=1 << 20)] = 0,
    attempt: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=1 << 20)] = 65536,
    follow: Annotated[bool, Query(description="Stream text/plain until the worker ends.")] = False,
) -> LogChunk | StreamingResponse:
    if follow:
        # 404 now, not mid-stream.
        services.logs.check(job_id, actor=user, worker=worker, attempt=attempt)
        tokens = services.tokens
        stream = services.logs.follow(
            job_id,
            actor=user,
            worker=worker,
            attempt=attempt,
            offset=offset,
            still_valid=lambda: tokens.still_valid(authorization),
        )
        return StreamingResponse(stream, media_type="text/plain; charset=utf-8")
    return services.logs.read(
        job_id, actor=user, worker=worker, attempt=attempt, offset=offset, limit=limit
    )
