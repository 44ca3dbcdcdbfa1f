"""The composition root: what ``gpuyard up`` runs, and the one place that wires the parts.

It builds the store, the executor, the controller and the API app from the settings, and runs
them in one process: the API on uvicorn's event loop, the controller on a thread of its own.
Nothing below this module knows which executor or database it runs with.

The process holds ``<home>/server.lock`` for its life, so two servers never drive the same
home; the lock dies with the process, so a server killed with ``kill -9`` can be started again
at once. Workers run under their own supervisors in their own sessions and outlive this
process; the next ``gpuyard up`` adopts them.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import SecretStr

from gpuyard.clock import Clock, SystemClock
from gpuyard.controller.alerts import WebhookAlerts
from gpuyard.controller.loop import Controller, LaunchConfig
from gpuyard.errors import Conflict, InvalidSpec
from gpuyard.executors.base import Executor
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.node_data import NodeData
from gpuyard.executors.local.node_images import ImagesConfig, NodeImages
from gpuyard.executors.probes.host import DiskThresholds
from gpuyard.images.local_registry import (
    SupervisedRegistry,
    free_port,
    missing_tools,
    pool_registry_files,
)
from gpuyard.launch.network import NetworkPreset
from gpuyard.launch.plan import MpiInstall
from gpuyard.models.environment import inherited_environment
from gpuyard.models.job import MpiImplementation
from gpuyard.models.worker import RunAs
from gpuyard.periodic import Periodic, paced
from gpuyard.private_files import write_private
from gpuyard.server.app import create_app
from gpuyard.server.disk_reserve import DiskReserve
from gpuyard.services.auth import TokenService
from gpuyard.services.datasets import DatasetCatalogue
from gpuyard.services.idle import IdleReclaim
from gpuyard.settings import LOCAL_REGISTRY, Settings
from gpuyard.store.engine import Store

__all__ = [
    "check_exposure",
    "ensure_owner_token",
    "launch_config",
    "make_executor",
    "own_registry",
    "read_server_file",
    "run_as",
    "run_server",
    "server_lock",
]

log = logging.getLogger("gpuyard.up")

SWITCH_INTERVAL = 0.001
"""Seconds a thread may hold the GIL while another waits for it (see run_server)."""
IDLE_EVERY = 60.0
"""Seconds between looks for idle interactive jobs."""
UPLOADS_EVERY = 600.0
"""Seconds between looks for dataset uploads to expire (at most)."""


@contextlib.contextmanager
def server_lock(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / "server.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            info = read_server_file(home)
            where = f" at {info['url']} (pid {info['pid']})" if info else ""
            raise Conflict(
                f"a gpuyard server is already running for {home}{where}; use it, or stop it with "
                "`gpuyard down`"
            ) from None
        yield
    finally:
        os.close(fd)


def read_server_file(home: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((home / "server.json").read_text())
        return data
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _bind(host: str, port: int) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted connections only when the
    # socket says it is TCP, and without it every keep-alive response waits ~40 ms for the
    # client's delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Conflict(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port (0 picks "
            "a free one)"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def run_as(settings: Settings, *, euid: int) -> tuple[RunAs, str]:
    """Whose account runs jobs on this pool, and a warning when the setting cannot be honoured:
    only root can switch users, so a pool run by anyone else runs jobs as itself."""
    if settings.run_as is RunAs.OWNER and euid != 0:
        return RunAs.POOL, (
            f"jobs run as the pool's own user (uid {euid}), not as their owners' accounts: "
            "switching users needs a pool run by root; set GPUYARD_RUN_AS=pool to say that "
            "this is meant (docs/security.md)"
        )
    return settings.run_as, ""


def launch_config(
    settings: Settings, *, euid: int | None = None, who: RunAs | None = None
) -> LaunchConfig:
    """The launch inputs every job shares: the MPI installations, the network preset, and
    whose OS account runs the workers (:func:`run_as`; ``euid``: this process's by default)."""
    prefixes = {
        MpiImplementation.OPENMPI: settings.mpi_openmpi,
        MpiImplementation.MPICH: settings.mpi_mpich,
    }
    mpi = {
        impl: MpiInstall(
            bin_dir=str(prefix / "bin"),
            lib_dir=str(prefix / "lib"),
            # mpi4py's wheels carry a build for each MPI and load the libmpi found here, so one
            # mpi4py serves jobs of either implementation (mpi4py/_mpiabi.py; a directory is
            # searched for libmpi.so, .so.12 (MPICH) and .so.40 (Open MPI)).
            env={"MPI4PY_LIBMPI": str(prefix / "lib")},
        )
        for impl, prefix in prefixes.items()
        if prefix is not None
    }
    network = NetworkPreset(
        network=settings.network,
        interface=settings.network_iface,
        large_scale_gpus=settings.large_scale_gpus,
    )
    if who is None:
        who, _warning = run_as(settings, euid=os.geteuid() if euid is None else euid)
    return LaunchConfig(
        mpi=mpi, network=network, run_as=who, image_pull_timeout=settings.image_pull_timeout
    )


def run_server(settings: Settings, *, on_ready: Callable[[str], None] = lambda _url: None) -> None:
    """Serve until SIGINT/SIGTERM. Running jobs are left running for the next server to adopt."""
    # The API's event loop gives up the GIL at every socket call and then waits for it; with
    # Python's default 5 ms switch interval it waits behind a busy controller pass that long
    # each time. 1 ms cut the p99 of submissions during a burst (bench/control_plane.py).
    sys.setswitchinterval(SWITCH_INTERVAL)
    with server_lock(settings.home), own_registry(settings) as serving:
        _serve(serving, on_ready, own=settings.registry == LOCAL_REGISTRY)


def _serve(settings: Settings, on_ready: Callable[[str], None], *, own: bool) -> None:
    """Run the pool on ``settings`` (``own``: its registry is the pool's own, whose URL
    ``server.json`` records for those who push to it)."""
    reserve = DiskReserve(settings.home, settings.disk_reserve)
    reserve.start()
    store = _open_store(settings, reserve)
    tls = check_exposure(settings)
    sock, url = _listen(settings, tls=tls)
    executor = make_executor(settings)
    _log_isolation(executor)
    clock = SystemClock()
    who = _whose_jobs(settings, executor, users=_user_count(store))
    controller = _make_controller(settings, store, executor, clock=clock, url=url, who=who)
    app = create_app(
        settings,
        store=store,
        executor=executor,
        clock=clock,
        notify=controller.notify,
        controller_health=controller.health,
        plan_shell=controller.lifecycle.hold.plan_shell,
        disk_health=reserve.state,
        program_env=_program_env(settings, executor, who),
        data_locality=controller.locality.apply,
    )
    ensure_owner_token(settings, app.state.services.tokens)
    controller.start()
    idle = _idle_reclaim(app.state.idle)
    uploads = _upload_expiry(app.state.services.datasets)
    own_url = settings.registry if own else None
    _write_server_file(
        settings.server_file,
        {"url": url, "pid": os.getpid(), "started_at": time.time(), "registry": own_url},
    )
    server = _PoolServer(_uvicorn_config(app, settings, tls=tls))
    on_ready(url)
    try:
        server.run(sockets=[sock])
    finally:
        idle.stop()
        uploads.stop()
        controller.stop()
        executor.close()
        store.close()
        reserve.stop()
        _remove_server_file(settings)


def _upload_expiry(datasets: DatasetCatalogue) -> Periodic:
    """Unfinished dataset uploads expired (docs/datasets.md, "Uploaded"), looked at every
    tenth of the expiry, at most every ten minutes."""
    every = max(1.0, min(UPLOADS_EVERY, datasets.upload_expiry / 10))
    thread = Periodic(
        "upload-expiry",
        lambda: paced(datasets.expire_uploads, every, log, "dataset upload expiry failed"),
    )
    thread.start(wait_first=every)
    return thread


def _idle_reclaim(reclaim: IdleReclaim) -> Periodic:
    """Idle interactive jobs reclaimed (docs/interactive.md#idle), looked at every minute
    (more often under a short timeout)."""
    every = max(1.0, min(IDLE_EVERY, reclaim.timeout / 10))
    thread = Periodic(
        "idle-reclaim", lambda: paced(reclaim.sweep, every, log, "idle reclaim failed")
    )
    if reclaim.timeout > 0:
        thread.start(wait_first=every)
    return thread


class _PoolServer(uvicorn.Server):
    """uvicorn's server, except that the SIGINT or SIGTERM that ends it is not raised again
    once it has stopped. uvicorn raises it again so that the process dies by it, which would
    skip the pool's own shutdown after it: the controller, the store, the disk reserve and the
    server file (the pool's own registry died with it only through its parent-death signal)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def own_registry(settings: Settings) -> Iterator[Settings]:
    """The settings as they are, or, with ``GPUYARD_REGISTRY=local``, with the pool's own
    registry run for as long as this lasts (docs/images.md#the-pools-own-registry): its URL,
    CA and the pool's credential filled in."""
    if settings.registry != LOCAL_REGISTRY:
        yield settings
        return
    if missing := missing_tools():
        raise InvalidSpec(
            f"GPUYARD_REGISTRY=local runs Debian's docker-registry, but {', '.join(missing)} "
            "is missing: install it (apt-get install, or `make setup`), or name a registry"
        )
    files = pool_registry_files(settings.home, port=settings.registry_port or free_port())
    registry = SupervisedRegistry(
        files.config, url=files.url, ca_file=files.ca_file, log_file=files.directory / "log"
    )
    registry.start()
    log.info("the pool's own registry serves at %s (pid %s)", files.url, registry.pid)
    try:
        yield settings.model_copy(
            update={
                "registry": files.url,
                "registry_ca": files.ca_file,
                "registry_user": files.user,
                "registry_password": SecretStr(files.password),
            }
        )
    finally:
        registry.stop()


def _open_store(settings: Settings, reserve: DiskReserve) -> Store:
    """The pool's database, migrated; a full disk releases the reserve for it."""
    store = Store(settings.resolved_database_url)
    store.on_full.append(reserve.release)
    store.migrate()
    return store


def _listen(settings: Settings, *, tls: bool) -> tuple[socket.socket, str]:
    """The API's listening socket, and the URL clients reach it at."""
    sock = _bind(settings.host, settings.port)
    port = sock.getsockname()[1]
    return sock, f"{'https' if tls else 'http'}://{_url_host(settings.host)}:{port}"


def _log_isolation(executor: Executor) -> None:
    """Say at start what the local executor holds each worker to, and what it cannot."""
    if not isinstance(executor, LocalExecutor):
        return
    for note in executor.isolation.notes:
        log.info("%s", note)
    log.info("isolation of each worker: %s", executor.enforced().describe())
    for warning in executor.warnings():
        log.warning("%s", warning)


def _user_count(store: Store) -> int:
    from sqlalchemy import func, select

    from gpuyard.store.tables import UserRow

    with store.read() as session:
        return int(session.scalar(select(func.count()).select_from(UserRow)) or 0)


def _whose_jobs(
    settings: Settings, executor: Executor, *, users: int, euid: int | None = None
) -> RunAs:
    """Whose account runs jobs (:func:`run_as`), falling back to the pool's own where the
    owners' accounts could not start them. That is a warning only where it matters: on a
    pool with more than one user (``users``), whose jobs then share one account; on a
    one-user pool it is one line of information (a user added later gets the warning at the
    next start). ``euid``: this process's by default."""
    who, warning = run_as(settings, euid=os.geteuid() if euid is None else euid)
    if not warning and who is RunAs.OWNER and (unreachable := _unreachable_home(executor)):
        # Every job would fail to start: run them as the pool's user instead. (A root pool
        # with the default home under /root lands here; `make run` too.)
        who = RunAs.POOL
        warning = (
            f"{unreachable}. Until then jobs run as the pool's own user, which can read the "
            "pool's files"
        )
    if warning and users > 1:
        log.warning("%s", warning)
    elif warning:
        log.info("jobs run as the pool's own user (one user so far; docs/security.md)")
    return who


def _program_env(settings: Settings, executor: Executor, who: RunAs) -> dict[str, str] | None:
    """What a job inherits from the pool, where a submission can check that the job's account
    runs its program: jobs on this machine (the local executor) under their owners' accounts.
    None elsewhere (docs/jobs.md, "The job's environment", says what is checked where)."""
    if who is not RunAs.OWNER or not isinstance(executor, LocalExecutor):
        return None
    return inherited_environment(os.environ, settings.job_env_allow)


def _make_controller(
    settings: Settings,
    store: Store,
    executor: Executor,
    *,
    clock: Clock,
    url: str,
    who: RunAs,
) -> Controller:
    return Controller(
        store,
        executor,
        clock=clock,
        interval=settings.controller_interval,
        inspect_every=settings.inspect_interval,
        control_url=url,
        launch_config=launch_config(settings, who=who),
        alert=WebhookAlerts(settings.alert_webhook) if settings.alert_webhook else None,
        usage_interval=settings.usage_interval,
        predict_run_times=settings.predict_run_times,
    )


def _uvicorn_config(app: FastAPI, settings: Settings, *, tls: bool) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        # Log followers hold connections open; do not let them block a shutdown.
        timeout_graceful_shutdown=3,
        # A shell's messages are keystrokes and resizes (services/shell.py takes at most
        # 64 KiB of input at once): a WebSocket message is not let grow past 1 MiB.
        ws_max_size=1 << 20,
        ssl_certfile=str(settings.tls_cert) if tls else None,
        ssl_keyfile=str(settings.tls_key) if tls else None,
    )


def _remove_server_file(settings: Settings) -> None:
    """Remove ``server.json`` if it is still this process's (not a successor's)."""
    info = read_server_file(settings.home)
    if info and info.get("pid") == os.getpid():
        settings.server_file.unlink(missing_ok=True)


def _unreachable_home(executor: Executor) -> str:
    """Why jobs cannot run as their owners' accounts under this executor's home ("" when they
    can, or when the executor cannot tell): the local executor's, or a Ray node's."""
    check = getattr(executor, "unreachable_home", None)
    return str(check()) if callable(check) else ""


def make_executor(settings: Settings) -> Executor:
    """The executor the settings name: the local one, or the Ray cluster's (which connects to
    the cluster as a Ray driver and starts a node agent on each of its nodes)."""
    if settings.executor == "ray":
        if not settings.ray_address:
            raise InvalidSpec(
                "the Ray executor needs the cluster's address: --ray-address HEAD:PORT "
                "(GPUYARD_RAY_ADDRESS)"
            )
        from gpuyard.executors.ray.executor import RayExecutor  # ray itself: when it connects

        return RayExecutor(
            settings.home,
            address=settings.ray_address,
            namespace=settings.ray_namespace,
            node_home=str(settings.ray_node_home or settings.home / "node"),
            interface=settings.ray_interface,
            images=images_config(settings),
        )
    return LocalExecutor(
        settings.home,
        virtual_nodes=settings.virtual_nodes,
        gpus_per_node=settings.gpus_per_node,
        cpus_per_node=settings.cpus_per_node,
        memory_per_node=settings.memory_per_node,
        pids_limit=settings.pids_per_worker,
        pids_ceiling=settings.pids_ceiling,
        memory_ceiling=settings.memory_ceiling or 0,
        inject_faults=settings.inject_faults,
        log_max=settings.log_max,
        env_allow=settings.job_env_allow,
        default_memory=settings.default_memory,
        private_tmp=settings.private_tmp,
        gpu_device_files=settings.gpu_device_files,
        gpu_shared_files=settings.gpu_shared_device_files,
        images=_node_images(settings),
        checkpoint_memory=settings.checkpoint_memory,
        disk_thresholds=DiskThresholds(settings.disk_warning, settings.disk_critical),
        data=NodeData(
            settings.data_cache or settings.home / "data-cache",
            retention=settings.data_retention,
            max_bytes=settings.data_cache_max,
        ),
    )


def _node_images(settings: Settings) -> NodeImages | None:
    """This machine's image cache (``<home>/images``) and the registry it pulls from; None
    when the pool has no registry."""
    config = images_config(settings)
    return None if config is None else config.node_images(settings.home)


def images_config(settings: Settings) -> ImagesConfig | None:
    """What a node needs to run jobs in images, from the pool's settings (None: no registry)."""
    if not settings.registry:
        return None
    password = settings.registry_password
    return ImagesConfig(
        url=settings.registry,
        ca_pem=settings.registry_ca.read_text() if settings.registry_ca else None,
        user=settings.registry_user,
        password=password.get_secret_value() if password is not None else None,
        cache_max=settings.image_cache_max,
        cdi_dirs=tuple(settings.gpu_cdi_dirs),
    )


OWNER_TOKEN_LIFE = 366 * 86400.0
"""The pool owner's token lasts a year; each ``gpuyard up`` replaces it once it has expired."""


def check_exposure(settings: Settings) -> bool:
    """Whether to serve TLS. Refuses (InvalidSpec, saying what to do) a non-loopback address
    without TLS unless ``insecure`` is set, which logs a warning."""
    has_cert, has_key = settings.tls_cert is not None, settings.tls_key is not None
    if has_cert != has_key:
        raise InvalidSpec("TLS needs both --tls-cert and --tls-key (PEM files)")
    for path in (settings.tls_cert, settings.tls_key):
        if path is not None and not path.is_file():
            raise InvalidSpec(f"TLS file {path} does not exist or is not a file")
    if has_cert:
        return True
    if _loopback(settings.host):
        return False
    if not settings.insecure:
        raise InvalidSpec(
            f"refusing to serve plain HTTP on {settings.host}: tokens would cross the network "
            "in clear text. Give --tls-cert and --tls-key, or --insecure if a TLS proxy or a "
            "trusted network protects it (or listen on 127.0.0.1, the default)"
        )
    log.warning(
        "serving plain HTTP on %s (--insecure): API tokens cross the network in clear text",
        settings.host,
    )
    return False


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    """The host part of the URL clients use: a wildcard address is reached at loopback."""
    if host in ("0.0.0.0", ""):  # noqa: S104 - naming it, not binding it
        return "127.0.0.1"
    return host


def ensure_owner_token(settings: Settings, tokens: TokenService) -> None:
    """Make sure ``<home>/owner.token`` (0600) holds a valid token of the pool's own user,
    who is an admin: a laptop pool needs no sign-in step (the CLI finds the file)."""
    path = settings.owner_token_file
    try:
        current = path.read_text().strip()
    except OSError:
        current = ""
    if current and tokens.valid(current) == settings.user:
        os.chmod(path, 0o600)
        return
    issued = tokens.issue_for_owner(settings.user, "gpuyard up", OWNER_TOKEN_LIFE)
    write_private(path, issued.token + "\n")


def _write_server_file(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)
