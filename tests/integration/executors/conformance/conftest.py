"""One conformance suite for every executor: the same tests, run against each.

A test gets a :class:`Harness`: an executor, the nodes to place workers on, and what only the
harness knows how to do on that executor (start the control plane again over the same
workers, make a node disappear). ``local`` is the local executor with two virtual nodes;
``ray`` is the Ray executor on the session's Ray test cluster (tests/conftest.py). A third
executor (Kubernetes, docs/kubernetes.md) passes when it provides a harness here.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuyard.executors.base import Executor
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState, WorkerStatus

_JOB_IDS = itertools.count(int(time.time()) % 100_000 * 100)
"""Job ids unique in the session: the Ray agents' node home is shared by the tests."""


@dataclass
class Harness:
    kind: str
    executor: Executor
    nodes: list[str]
    reopen: Callable[[], Executor]
    """A new executor over the same workers: the control plane started again."""
    lose: Callable[[str], None]
    """Make a node disappear as a crash would (the local executor: its worker's supervisor;
    Ray: the node's raylet)."""
    launched: list[Handle] = field(default_factory=list)

    def request(
        self,
        script: str,
        *,
        job: int | None = None,
        rank: int = 0,
        node: str | None = None,
        grace: float = 2.0,
    ) -> WorkerLaunch:
        node = node or self.nodes[rank % len(self.nodes)]
        env = {**self.executor.base_env(node), "PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        return WorkerLaunch(
            key=WorkerKey(next(_JOB_IDS) if job is None else job, 0, rank),
            node=node,
            argv=["bash", "-c", script],
            env=env,
            cwd="/",
            grace=grace,
        )

    def launch(self, request: WorkerLaunch, executor: Executor | None = None) -> Handle:
        handle = (executor or self.executor).launch(request)
        self.launched.append(handle)
        return handle

    def wait(
        self, handle: Handle, timeout: float = 30.0, executor: Executor | None = None
    ) -> WorkerStatus:
        deadline = time.monotonic() + timeout
        while True:
            status = (executor or self.executor).status([handle])[0]
            if status.state is not WorkerState.RUNNING or time.monotonic() > deadline:
                return status
            time.sleep(0.1)

    def log(self, handle: Handle) -> str:
        data, _size = self.executor.read_log(handle, 0, 1 << 20)
        return data.decode(errors="replace")

    def wait_log(self, handle: Handle, text: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            log = self.log(handle)
            if text in log or time.monotonic() > deadline:
                return log
            time.sleep(0.05)


def pid_from(log: str, word: str) -> int:
    """The pid a test's script printed as ``WORD <pid>``."""
    for line in log.splitlines():
        if line.startswith(word + " "):
            return int(line.split()[1])
    raise AssertionError(f"no {word!r} line in the log: {log!r}")


def gone(pid: int, timeout: float = 15.0) -> bool:
    """Whether process ``pid`` has ended (or is a zombie) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def _cleanup(executor: Executor, handles: Sequence[Handle]) -> None:
    for handle in handles:
        with contextlib.suppress(Exception):
            executor.kill(handle)
    deadline = time.monotonic() + 10
    for handle in handles:
        with contextlib.suppress(Exception):
            while (
                executor.status([handle])[0].state is WorkerState.RUNNING
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)


@pytest.fixture(scope="session")
def ray_executor(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The Ray executor on the session's cluster, for the whole session (its agents start
    once)."""
    import ray

    from gpuyard.executors.ray.executor import RayExecutor

    home = tmp_path_factory.mktemp("ray-conformance")
    executor = RayExecutor(
        home, address=ray_cluster.address, namespace="conformance", interface="lo"
    )
    yield executor
    executor.shutdown_agents()
    executor.close()
    ray.shutdown()


def _local(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    make = request.getfixturevalue("make_executor")
    executor = make(tmp_path / "home", virtual_nodes=2, gpus_per_node=0)

    def reopen() -> Executor:
        return make(tmp_path / "home", virtual_nodes=2, gpus_per_node=0)  # type: ignore[no-any-return]

    def lose(node: str) -> None:
        # A virtual node has no agent of its own: what dies is the worker's supervisor.
        for handle in harness.launched:
            if handle.get("node") == node and handle.get("pid"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(handle["pid"], signal.SIGKILL)

    harness = Harness("local", executor, [n.name for n in executor.nodes()], reopen, lose)
    yield harness
    _cleanup(executor, harness.launched)


def _ray(request: pytest.FixtureRequest) -> Iterator[Harness]:
    from gpuyard.executors.ray.executor import RayExecutor

    cluster = request.getfixturevalue("ray_cluster")
    executor: RayExecutor = request.getfixturevalue("ray_executor")
    names = sorted(n.name for n in executor.nodes())
    assert names == sorted(cluster.nodes), names
    lost: list[str] = []

    def reopen() -> Executor:
        # A second control plane in this process: it knows no agent and finds them by name.
        return RayExecutor(
            executor.home,
            address=cluster.address,
            namespace=executor.namespace,
            interface="lo",
        )

    def lose(node: str) -> None:
        cluster.kill_node(node)
        lost.append(node)

    harness = Harness("ray", executor, names, reopen, lose)
    yield harness
    _cleanup(executor, harness.launched)
    for node in lost:  # back for the next tests, as a new Ray node of the same name
        cluster.add_node(int(node.removeprefix("node")))
        deadline = time.monotonic() + 60
        while node not in {n.name for n in executor.nodes()} and time.monotonic() < deadline:
            time.sleep(0.5)


@pytest.fixture(
    params=["local", pytest.param("ray", marks=[pytest.mark.xdist_group("ray"), pytest.mark.slow])]
)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "local":
        yield from _local(request, tmp_path)
    else:
        yield from _ray(request)
