"""``create_app(settings, …)``: the FastAPI application, REST under /api/v1."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Depends, FastAPI

from gpuyard import __version__
from gpuyard.clock import Clock, SystemClock
from gpuyard.executors.base import Executor
from gpuyard.executors.local.procfs import listener_uid
from gpuyard.images.access import RegistryAccess
from gpuyard.launch.program import Account
from gpuyard.scheduler import Snapshot
from gpuyard.secret_box import SecretBox
from gpuyard.server import proxy
from gpuyard.server.api_docs import install_api_docs
from gpuyard.server.deps import Services, UserDep
from gpuyard.server.errors import install_error_handlers
from gpuyard.server.guard import RequestGuard
from gpuyard.server.openapi import install_openapi
from gpuyard.server.routers import (
    accounts,
    auth,
    datasets,
    health,
    images,
    job_exec,
    jobs,
    metrics,
    nodes,
    pools,
    registry_logins,
    scheduling,
    usage,
)
from gpuyard.services.accounts import AccountService, parse_tiers
from gpuyard.services.auth import Audit, Policy, TokenService
from gpuyard.services.checkpoints import Checkpoints
from gpuyard.services.datasets import DatasetCatalogue
from gpuyard.services.idle import IdleReclaim
from gpuyard.services.image_catalogue import ImageCatalogue
from gpuyard.services.images import ImagePinner
from gpuyard.services.interactive import Interactive
from gpuyard.services.job_exec import ExecService
from gpuyard.services.job_search import JobSearch
from gpuyard.services.jobs import JobService
from gpuyard.services.logs import LogService
from gpuyard.services.metrics import MetricsService
from gpuyard.services.nodes import NodeService
from gpuyard.services.notify import Notify, nobody
from gpuyard.services.program_check import ProgramCheck
from gpuyard.services.registry_logins import RegistryLogins
from gpuyard.services.scheduling import SchedulingService
from gpuyard.services.shell import PlanShell, ShellService
from gpuyard.services.slurm_steps import SlurmStepService
from gpuyard.services.usage import UsageService
from gpuyard.settings import Settings
from gpuyard.store.durations import RunTimes
from gpuyard.store.engine import Store
from gpuyard.web import install_web

__all__ = ["create_app"]


async def _signed_in(user: UserDep) -> str:
    return user


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    executor: Executor | None = None,
    clock: Clock | None = None,
    notify: Notify = nobody,
    controller_health: Callable[[], dict[str, Any]] | None = None,
    plan_shell: PlanShell | None = None,
    disk_health: Callable[[], dict[str, Any]] | None = None,
    program_env: Mapping[str, str] | None = None,
    data_locality: Callable[[Snapshot], Snapshot] | None = None,
) -> FastAPI:
    """The API app. Without ``store`` it opens (and migrates) the one ``settings`` names.
    ``program_env``: where jobs run on this machine as their owners' accounts, what they
    inherit from the pool; a submission is then refused when the job's account cannot run its
    program (:mod:`gpuyard.services.program_check`).
    ``disk_health``: the ``disk`` section of ``/health`` (the pool's disk reserve).
    ``plan_shell``: how the controller plans a shell's launch (``gpuyard exec JOB shell``);
    without it, or without ``executor``, this server opens no shells.
    ``data_locality``: puts the nodes' dataset copies and the copy rate on the snapshots of
    the predictions made here (the controller's; docs/datasets.md, "Data preparation")."""
    if store is None:
        store = Store(settings.resolved_database_url)
        store.migrate()
    clock = clock or SystemClock()
    app = FastAPI(
        title="gpuyard",
        version=__version__,
        description="An AI compute pool: submit, schedule, run and watch training jobs.",
        docs_url=None,  # served from the package instead of a CDN: install_api_docs
        openapi_url="/api/v1/openapi.json",
    )
    services = _services(
        settings,
        store,
        executor,
        clock=clock,
        notify=notify,
        plan=plan_shell,
        data_locality=data_locality,
    )
    if program_env is not None:
        # Jobs run on this machine as their owners' accounts: the server can tell whose
        # program runs, and whose process listens on a service's port.
        programs = ProgramCheck(store, pool_env=program_env)
        services.jobs.program_check = programs.check
        services.interactive.listener = listener_uid
        services.interactive.owner_uid = lambda owner: _uid(programs.account(owner))
        services.datasets.account = programs.account  # a path is read as its maker's account
    app.state.services = services
    app.state.idle = IdleReclaim(
        store,
        services.interactive,
        clock=clock,
        timeout=settings.idle_timeout,
        action=settings.idle_action,
        gpu_util=settings.idle_gpu_util,
        gpu_usage=lambda: {j: p.gpu_util for j, p in services.usage.latest().jobs.items()},
        notify=notify,
    )
    app.state.controller_health = controller_health
    app.state.disk_health = disk_health
    app.state.metrics = MetricsService(
        store,
        services.policy,
        controller_health or dict,
        services.usage.latest,
        run_times=services.scheduling.run_times,
    )
    install_error_handlers(app)
    install_openapi(app)
    install_api_docs(app)
    app.add_middleware(RequestGuard)
    _install_routes(app)
    # The web UI under / (docs/web.md): pages over the same services, signed in by cookie.
    install_web(app)
    return app


def _services(
    settings: Settings,
    store: Store,
    executor: Executor | None,
    *,
    clock: Clock,
    notify: Notify,
    plan: PlanShell | None,
    data_locality: Callable[[Snapshot], Snapshot] | None = None,
) -> Services:
    """The services the routes call, sharing one policy and one audit."""
    audit = Audit(clock)
    policy = Policy(store, clock, audit, admin_exec=settings.admin_exec)
    accounts = _account_service(settings, store, clock=clock, notify=notify, policy=policy)
    on_delete = executor.remove_job if executor is not None else (lambda _job_id: None)
    access = registry_access(settings)
    logins = RegistryLogins(
        store,
        clock=clock,
        policy=policy,
        box=SecretBox(settings.resolved_secrets_key_file),
        sources=settings.image_sources,
        sources_ca=settings.image_sources_ca,
    )
    catalogue = ImageCatalogue(
        store,
        clock=clock,
        policy=policy,
        access=access,
        upload_dir=settings.home / "uploads",
        upload_max=settings.image_upload_max,
        sources=settings.image_sources,
        sources_ca=settings.image_sources_ca,
        saved_login=logins.credentials_for,
    )
    jobs = JobService(
        store,
        clock=clock,
        notify=notify,
        on_delete=on_delete,
        accounts=accounts,
        policy=policy,
        images=ImagePinner(access, catalogue.may_use),
    )
    execs = ExecService(store, clock=clock, policy=policy, notify=notify)
    interactive = Interactive(
        store,
        policy,
        _job_dir(settings, executor),
        clock=clock,
        programs=_programs(os.environ),
        notify=notify,
    )
    datasets = DatasetCatalogue(
        store,
        clock=clock,
        policy=policy,
        roots=settings.dataset_roots,
        data_dir=settings.home / "datasets",
        upload_max=settings.dataset_upload_max,
        upload_expiry=settings.dataset_upload_expiry,
    )
    datasets.resume()
    jobs.resolve = lambda specs, owner: interactive.resolved(
        datasets.resolved(specs, owner=owner), owner=owner
    )
    return Services(
        jobs=jobs,
        nodes=NodeService(store, policy),
        logs=LogService(store, executor, policy),
        accounts=accounts,
        scheduling=SchedulingService(
            store,
            clock=clock,
            notify=notify,
            check_submission=lambda spec, owner: jobs.check_submission(spec, owner=owner),
            policy=policy,
            run_times=RunTimes() if settings.predict_run_times else None,
            data_locality=data_locality,
        ),
        tokens=TokenService(store, clock=clock, policy=policy, audit=audit),
        policy=policy,
        usage=UsageService(store, clock=clock, policy=policy, interval=settings.usage_interval),
        execs=execs,
        shells=ShellService(
            store, clock=clock, execs=execs, executor=executor, plan=plan, notify=notify
        ),
        search=JobSearch(store, policy),
        slurm_steps=SlurmStepService(store, executor, policy),
        images=catalogue,
        registry_logins=logins,
        interactive=interactive,
        datasets=datasets,
        checkpoints=Checkpoints(store, policy, _job_dir(settings, executor), clock=clock),
    )


def _uid(account: Account | None) -> int | None:
    return account.uid if account is not None else None


def _programs(environ: Mapping[str, str]) -> str:
    """This server's ``PATH``, its own interpreter's directory first (a virtual environment
    started without being activated): where a service job finds JupyterLab or TensorBoard
    when neither its image nor its submitter says."""
    here = os.path.dirname(sys.executable)
    return os.pathsep.join(dict.fromkeys([here, *environ.get("PATH", "").split(os.pathsep)]))


def _job_dir(settings: Settings, executor: Executor | None) -> Callable[[int], str]:
    """Where a job's files are on its nodes (a TensorBoard mounts its sources' outputs)."""
    if executor is not None:
        return executor.job_dir
    return lambda job_id: str(settings.home / "jobs" / str(job_id))


def registry_access(settings: Settings) -> RegistryAccess | None:
    """The pool's image registry, as its settings name it (None: it has none)."""
    password = settings.registry_password
    return RegistryAccess.of(
        settings.registry,
        settings.registry_ca,
        settings.registry_user,
        password.get_secret_value() if password is not None else None,
    )


def _account_service(
    settings: Settings, store: Store, *, clock: Clock, notify: Notify, policy: Policy
) -> AccountService:
    service = AccountService(
        store,
        clock=clock,
        user_tiers=parse_tiers(settings.user_tiers, "GPUYARD_USER_TIERS"),
        urgent_tier=parse_tiers([settings.urgent_tier], "GPUYARD_URGENT_TIER")[0],
        notify=notify,
        policy=policy,
    )
    # The pool's own user and GPUYARD_ADMINS are admins from the start; everyone else is
    # created by an admin (`gpuyard users add`), who gives them a token.
    service.ensure_admins([settings.user, *settings.admins])
    return service


def _install_routes(app: FastAPI) -> None:
    app.include_router(health.router, prefix="/api/v1")
    app.include_router(metrics.router)
    # Everything else needs a signed-in user: resolved once per request (FastAPI caches a
    # dependency within a request, so the routes' own UserDep reuses it).
    signed_in = [Depends(_signed_in)]
    routers = (
        jobs,
        job_exec,
        nodes,
        accounts,
        pools,
        scheduling,
        auth,
        usage,
        images,
        registry_logins,
        datasets,
    )
    for router in routers:
        app.include_router(router.router, prefix="/api/v1", dependencies=signed_in)
    app.include_router(job_exec.shell_router, prefix="/api/v1")
    # Interactive jobs' services (docs/interactive.md): signs its callers in itself (a cookie
    # or a bearer token), outside the API.
    app.include_router(proxy.router)
