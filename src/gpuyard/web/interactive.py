"""Interactive jobs in the web UI (docs/interactive.md, docs/web.md).

- On a job's page, "Create development environment" and "Create TensorBoard" (reference 002,
  4.3: made from the job, prefilled from it), shown when the viewer's ``allowed`` holds the
  matrix's ``dev-environment`` / ``tensorboard``; each makes a job of the viewer's with the
  same service calls as the CLI (``gpuyard notebook --from JOB``, ``gpuyard tensorboard
  JOB``), which check the rights again.
- On an interactive job's page, for its owner only, "Open" with its service's state (the
  readiness probe of :meth:`Interactive.view`): the proxy lets nobody else in, so nobody else
  is offered the link.
- On the job list, the signed-in user's environments that have not ended.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import NotFound, PermissionDenied
from gpuyard.models import JobSpec, JobView
from gpuyard.models.access import Action
from gpuyard.models.ids import MAX_ID
from gpuyard.models.service import ServiceKind, ServiceView, environment_overrides
from gpuyard.services.interactive import open_path
from gpuyard.web.context import WebServices, services
from gpuyard.web.routing import CallerDep, WebRoute

__all__ = [
    "CREATE_ACTIONS",
    "MAX_LISTED",
    "create",
    "environments",
    "open_paths",
    "router",
    "service_of",
]

router = APIRouter(route_class=WebRoute, include_in_schema=False)

CREATE_ACTIONS = (Action.DEV_ENVIRONMENT, Action.TENSORBOARD)
"""The job page's buttons that make an interactive job from the job (its POST's path)."""

MAX_LISTED = 20
"""Environments the job list shows (newest first); ``gpuyard ls`` has them all."""


def create(s: WebServices, job_id: int, action: Action, *, actor: str) -> JobView:
    """A new job of ``actor``'s made from job ``job_id``: a development environment (a clone
    that serves JupyterLab) or a TensorBoard over its outputs. NotFound for a job ``actor``
    may not see, PermissionDenied for one the matrix gives no such right over."""
    source = s.jobs.get(job_id, actor=actor)
    if action not in source.allowed:
        raise PermissionDenied(f"you may not make a {action.value} from job {job_id}")
    if action is Action.DEV_ENVIRONMENT:
        overrides = environment_overrides(ServiceKind.NOTEBOOK, f"notebook-of-{job_id}")
        return s.jobs.clone(job_id, actor=actor, overrides=overrides)
    board = JobSpec.model_validate(
        {
            "service": {"kind": ServiceKind.TENSORBOARD, "jobs": [job_id]},
            "name": f"tensorboard-{job_id}",
        }
    )
    return s.jobs.submit(board, owner=actor)


def service_of(s: WebServices, job: JobView, *, actor: str) -> ServiceView | None:
    """Job ``job``'s service as its owner sees it, with the readiness probe; None when it
    serves nothing or ``actor`` is not its owner (who alone may open it)."""
    if job.spec is None or job.spec.service is None or job.owner != actor:
        return None
    return s.interactive.view(job.id, actor=actor)


def environments(s: WebServices, *, owner: str) -> list[JobView]:
    """``owner``'s interactive jobs that have not ended, newest first (at most
    :data:`MAX_LISTED`)."""
    found = []
    for job_id in s.interactive.services_of(owner)[:MAX_LISTED]:
        try:
            found.append(s.jobs.get(job_id, actor=owner))
        except NotFound:  # deleted since: it is simply not listed
            continue
    return found


def open_paths(jobs: list[JobView]) -> dict[int, str]:
    """Where each interactive job of ``jobs`` is opened, by id."""
    return {
        job.id: open_path(job.id, job.spec.service.kind)
        for job in jobs
        if job.spec is not None and job.spec.service is not None
    }


@router.get("/jobs/{job_id}/service.json")
async def service_state(
    request: Request, caller: CallerDep, job_id: Annotated[int, Path(ge=1, le=MAX_ID)]
) -> JSONResponse:
    """The service's state (the page's script asks while it starts): the API's
    ``GET /jobs/{id}/service``, with the page's session."""
    interactive = services(request).interactive
    view = await run_in_threadpool(interactive.view, job_id, actor=caller.name)
    return JSONResponse(view.model_dump(mode="json"), headers={"Cache-Control": "no-store"})
