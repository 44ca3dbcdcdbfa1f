"""/api/v1/health: open to everyone (load balancers and monitors have no token)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from starlette.concurrency import run_in_threadpool

from gpuyard import __version__
from gpuyard.server.deps import ServicesDep
from gpuyard.services.disclosure import disclosed_errors

router = APIRouter(tags=["pool"])


@router.get(
    "/health",
    responses={503: {"description": "The controller is not making progress (see its errors)."}},
)
async def health(
    request: Request,
    response: Response,
    services: ServicesDep,
    authorization: Annotated[
        str | None, Header(description="Optional: errors of the jobs its holder may see.")
    ] = None,
) -> dict[str, Any]:
    """Whether the server and its controller work. 503 while the controller's loop makes no
    progress (it stopped, or no pass has completed for a while); its recent errors say why.
    ``degraded`` (200) while the pool's disk is full (``disk`` says why). An error of a job the
    caller may not see (any job, without a token) is there without the job's id or its message
    (docs/security.md)."""
    controller = request.app.state.controller_health
    state = controller() if controller else None
    if state and state.get("recent_errors"):
        actor = None
        if authorization is not None:
            caller = await run_in_threadpool(services.tokens.authenticate, authorization)
            actor = caller.name
        errors = await run_in_threadpool(
            disclosed_errors, services.jobs.store, services.policy, actor, state["recent_errors"]
        )
        state = {**state, "recent_errors": errors}
    stalled = state is not None and not state.get("progressing", True)
    disk_state = request.app.state.disk_health
    disk = disk_state() if disk_state else None
    full = disk is not None and disk["status"] != "ok"
    if stalled:
        response.status_code = 503
    body = {
        "status": "stalled" if stalled else "degraded" if full else "ok",
        "version": __version__,
        "database": services.jobs.store.dialect,
        "controller": state,
        "disk": disk,
    }
    if disk is not None and full:
        body["reason"] = disk["reason"]
    return body
