"""What the web pages reach: the server's services, typed here without importing the server
(the web layer sits below it; the server mounts the pages)."""

from __future__ import annotations

from typing import Protocol, cast

from fastapi import Request

from gpuyard.services.accounts import AccountService
from gpuyard.services.auth import Policy, TokenService
from gpuyard.services.checkpoints import Checkpoints
from gpuyard.services.datasets import DatasetCatalogue
from gpuyard.services.image_catalogue import ImageCatalogue
from gpuyard.services.interactive import Interactive
from gpuyard.services.job_exec import ExecService
from gpuyard.services.job_search import JobSearch
from gpuyard.services.jobs import JobService
from gpuyard.services.logs import LogService
from gpuyard.services.nodes import NodeService
from gpuyard.services.scheduling import SchedulingService
from gpuyard.services.usage import UsageService

__all__ = ["WebServices", "services"]


class WebServices(Protocol):
    """The part of ``gpuyard.server.deps.Services`` the pages use."""

    @property
    def jobs(self) -> JobService: ...
    @property
    def nodes(self) -> NodeService: ...
    @property
    def logs(self) -> LogService: ...
    @property
    def accounts(self) -> AccountService: ...
    @property
    def scheduling(self) -> SchedulingService: ...
    @property
    def tokens(self) -> TokenService: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def usage(self) -> UsageService: ...
    @property
    def search(self) -> JobSearch: ...
    @property
    def images(self) -> ImageCatalogue: ...
    @property
    def execs(self) -> ExecService: ...
    @property
    def interactive(self) -> Interactive: ...
    @property
    def datasets(self) -> DatasetCatalogue: ...
    @property
    def checkpoints(self) -> Checkpoints: ...


def services(request: Request) -> WebServices:
    return cast("WebServices", request.app.state.services)
