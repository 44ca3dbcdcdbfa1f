"""What routers get injected: the services, and the acting user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from starlette.concurrency import run_in_threadpool

from gpuyard.models.ids import MAX_ID
from gpuyard.services.accounts import AccountService
from gpuyard.services.auth import Policy, SignedIn, TokenService
from gpuyard.services.checkpoints import Checkpoints
from gpuyard.services.datasets import DatasetCatalogue
from gpuyard.services.image_catalogue import ImageCatalogue
from gpuyard.services.interactive import Interactive
from gpuyard.services.job_exec import ExecService
from gpuyard.services.job_search import JobSearch
from gpuyard.services.jobs import JobService
from gpuyard.services.logs import LogService
from gpuyard.services.nodes import NodeService
from gpuyard.services.registry_logins import RegistryLogins
from gpuyard.services.scheduling import SchedulingService
from gpuyard.services.shell import ShellService
from gpuyard.services.slurm_steps import SlurmStepService
from gpuyard.services.usage import UsageService

__all__ = [
    "INT64_MAX",
    "MAX_ID",
    "AuthorizationDep",
    "JobId",
    "Services",
    "ServicesDep",
    "SignedInDep",
    "UserDep",
]

INT64_MAX = (1 << 63) - 1
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="A job's id.")]
"""A job id in a path: bounded, so that no id reaches the database as an overflow."""


@dataclass(frozen=True, slots=True)
class Services:
    jobs: JobService
    nodes: NodeService
    logs: LogService
    accounts: AccountService
    scheduling: SchedulingService
    tokens: TokenService
    policy: Policy
    usage: UsageService
    execs: ExecService
    shells: ShellService
    search: JobSearch
    slurm_steps: SlurmStepService
    images: ImageCatalogue
    registry_logins: RegistryLogins
    interactive: Interactive
    checkpoints: Checkpoints
    datasets: DatasetCatalogue


# Dependencies are coroutines: FastAPI runs a plain function dependency in its thread pool,
# a hop that costs more than these do.
async def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def _user(
    request: Request,
    authorization: Annotated[
        str | None, Header(description="`Bearer <token>` (see `gpuyard login`).")
    ] = None,
) -> str:
    """The signed-in user's name; 401 without a valid token. Resolved tokens are cached, so
    this costs a dictionary lookup on most requests (and a read when it is not cached)."""
    services: Services = request.app.state.services
    signed = services.tokens.signed_in_cached(authorization)
    if signed is None:  # a read (and now and then a write): not on the event loop
        signed = await run_in_threadpool(services.tokens.signed_in, authorization)
    request.state.signed_in = signed
    return signed.caller.name


async def _signed_in(request: Request, _user_name: Annotated[str, Depends(_user)]) -> SignedIn:
    """The caller and the token it signed in with (what a token it makes is bounded by)."""
    signed: SignedIn = request.state.signed_in
    return signed


async def _authorization(
    _user_name: Annotated[str, Depends(_user)],
    authorization: Annotated[str | None, Header()] = None,
) -> str | None:
    """The request's (valid) ``Authorization`` header, for a stream to check again as it
    goes: a stream ends when its token is revoked."""
    return authorization


ServicesDep = Annotated[Services, Depends(_services)]
UserDep = Annotated[str, Depends(_user)]
SignedInDep = Annotated[SignedIn, Depends(_signed_in)]
AuthorizationDep = Annotated[str | None, Depends(_authorization)]
