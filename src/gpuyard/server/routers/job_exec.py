"""/api/v1/jobs/{id}/exec: thin routes over ExecService (``gpuyard exec``, docs/jobs.md),
and the shell's WebSocket over ShellService."""

from __future__ import annotations

import contextlib
import json
from typing import Annotated

from fastapi import APIRouter, Body, WebSocket, WebSocketDisconnect
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import GpuyardError
from gpuyard.models import ExecKill, ExecOutcome, ExecRun, ExecStatus, ExecStop
from gpuyard.server.deps import JobId, Services, ServicesDep, UserDep

router = APIRouter(prefix="/jobs/{job_id}/exec", tags=["exec"])
shell_router = APIRouter(prefix="/jobs/{job_id}/exec", tags=["exec"])
"""Signs its caller in itself: a WebSocket answers errors as messages, not as HTTP statuses."""


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


@shell_router.websocket("/shell")
async def shell(
    websocket: WebSocket, job_id: int, worker: int = 0, rows: int = 24, cols: int = 80
) -> None:
    """An interactive shell in the context of a held job's worker (services/shell.py has the
    protocol). Errors come as ``{"error", "code"}`` and a close code of 4000 + HTTP status."""
    services: Services = websocket.app.state.services
    await websocket.accept()
    try:
        caller = await run_in_threadpool(
            services.tokens.authenticate, websocket.headers.get("authorization")
        )
        opened = await run_in_threadpool(
            services.shells.open, job_id, actor=caller.name, worker=worker, rows=rows, cols=cols
        )
    except GpuyardError as exc:
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.send_text(json.dumps({"error": exc.detail, "code": exc.code}))
            await websocket.close(code=4000 + exc.status_code)
        return
    await services.shells.relay(opened, _Channel(websocket))
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # the client may have gone
        await websocket.close()


class _Channel:
    """A WebSocket as the shell's relay sees it."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket

    async def receive(self) -> bytes | str | None:
        try:
            message = await self.websocket.receive()
        except WebSocketDisconnect:
            return None
        if message["type"] == "websocket.disconnect":
            return None
        data: bytes | str | None = message.get("bytes")
        return data if data is not None else message.get("text") or ""

    async def send_bytes(self, data: bytes) -> None:
        await self.websocket.send_bytes(data)

    async def send_text(self, text: str) -> None:
        await self.websocket.send_text(text)
