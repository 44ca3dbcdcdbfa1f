"""Run a whole pool in one process tree: API server + controller + local executor.

This is what ``gpuyard up`` runs. The process holds ``<home>/pool.lock`` for its life, so two
pools never drive the same home; the lock dies with the process, so a pool killed with
``kill -9`` can be started again at once. Workers run under their own supervisors in their own
sessions and outlive this process; the next ``gpuyard up`` adopts them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from gpuyard.clock import SystemClock
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.server.app import create_app
from gpuyard.server.db.store import Store
from gpuyard.settings import Settings

__all__ = ["pool_lock", "read_server_file", "run_pool"]

log = logging.getLogger("gpuyard.pool")


@contextlib.contextmanager
def pool_lock(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / "pool.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            info = read_server_file(home)
            where = f" at {info['url']} (pid {info['pid']})" if info else ""
            raise Conflict(
                f"a pool is already running for {home}{where}; use it, or stop it with "
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


def run_pool(settings: Settings, *, on_ready: Callable[[str], None] = lambda _url: None) -> None:
    """Serve until SIGINT/SIGTERM. Running jobs are left running for the next pool to adopt."""
    home = settings.home
    with pool_lock(home):
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
        clock = SystemClock()
        controller = Controller(
            store, executor, clock=clock, interval=settings.controller_interval, control_url=url
        )
        app = create_app(
            settings,
            store=store,
            executor=executor,
            clock=clock,
            notify=controller.wake,
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
