"""What routers get injected: the services, and the acting user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request

from gpuyard.services.accounts import AccountService
from gpuyard.services.jobs import JobService
from gpuyard.services.logs import LogService
from gpuyard.services.nodes import NodeService
from gpuyard.services.scheduling import SchedulingService

__all__ = ["INT64_MAX", "JobId", "Services", "ServicesDep", "UserDep"]

INT64_MAX = (1 << 63) - 1
JobId = Annotated[int, Path(ge=1, le=INT64_MAX, description="A job's id.")]
"""A job id in a path: bounded, so that no id reaches the database as an overflow."""

USER_HEADER = "X-Gpuyard-User"


@dataclass(frozen=True, slots=True)
class Services:
    jobs: JobService
    nodes: NodeService
    logs: LogService
    accounts: AccountService
    scheduling: SchedulingService


# Dependencies are coroutines: FastAPI runs a plain function dependency in its thread pool,
# a hop that costs more than these do.
async def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def _user(x_gpuyard_user: Annotated[str | None, Header()] = None) -> str:
    # Until authentication exists the client says who it is; the server trusts it.
    return (x_gpuyard_user or "anonymous").strip()[:64] or "anonymous"


ServicesDep = Annotated[Services, Depends(_services)]
UserDep = Annotated[str, Depends(_user)]
