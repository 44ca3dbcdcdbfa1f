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
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from gpuyard.clock import SystemClock
from gpuyard.controller.loop import Controller, LaunchConfig
from gpuyard.errors import Conflict
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.launch.network import NetworkPreset
from gpuyard.launch.plan import MpiInstall
from gpuyard.models.job import MpiImplementation
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store

__all__ = ["launch_config", "read_server_file", "run_server", "server_lock"]

log = logging.getLogger("gpuyard.up")

SWITCH_INTERVAL = 0.001
"""Seconds a thread may hold the GIL while another waits for it (see run_server)."""


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


def launch_config(settings: Settings) -> LaunchConfig:
    """The launch inputs every job shares: the MPI installations and the network preset."""
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
    return LaunchConfig(mpi=mpi, network=network)


def run_server(settings: Settings, *, on_ready: Callable[[str], None] = lambda _url: None) -> None:
    """Serve until SIGINT/SIGTERM. Running jobs are left running for the next server to adopt."""
    home = settings.home
    # The API's event loop gives up the GIL at every socket call and then waits for it; with
    # Python's default 5 ms switch interval it waits behind a busy controller pass that long
    # each time. 1 ms cut the p99 of submissions during a burst (bench/control_plane.py).
    sys.setswitchinterval(SWITCH_INTERVAL)
    with server_lock(home):
        store = Store(settings.resolved_database_url)
        store.migrate()
        sock = _bind(settings.host, settings.port)
        port = sock.getsockname()[1]
        url = f"http://{settings.host}:{port}"
        executor = LocalExecutor(
            home,
            virtual_nodes=settings.virtual_nodes,
            gpus_per_node=settings.gpus_per_node,
            cpus_per_node=settings.cpus_per_node,
            memory_per_node=settings.memory_per_node,
        )
        for warning in executor.warnings():
            log.warning("%s", warning)
        clock = SystemClock()
        controller = Controller(
            store,
            executor,
            clock=clock,
            interval=settings.controller_interval,
            control_url=url,
            launch_config=launch_config(settings),
        )
        app = create_app(
            settings,
            store=store,
            executor=executor,
            clock=clock,
            notify=controller.notify,
            controller_health=controller.health,
        )
        controller.start()
        server_file = settings.server_file
        _write_server_file(server_file, {"url": url, "pid": os.getpid(), "started_at": time.time()})
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            # Log followers hold connections open; do not let them block a shutdown.
            timeout_graceful_shutdown=3,
        )
        server = uvicorn.Server(config)
        on_ready(url)
        try:
            server.run(sockets=[sock])
        finally:
            controller.stop()
            executor.close()
            store.close()
            info = read_server_file(home)
            if info and info.get("pid") == os.getpid():
                server_file.unlink(missing_ok=True)


def _write_server_file(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)
