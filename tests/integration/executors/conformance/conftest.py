"""One conformance suite for every executor: the same tests, run against each.

A test gets a :class:`Harness`: an executor, the nodes to place workers on, and what only the
harness knows how to do on that executor (start the control plane again over the same
workers, make a node disappear). ``local`` is the local executor with two virtual nodes;
``ray`` is the Ray executor on the session's Ray test cluster (tests/conftest.py). A third
executor (Kubernetes, docs/kubernetes.md) passes when it provides a harness here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuyard.executors.base import Executor
from gpuyard.testing.conformance import Harness, cleanup


@pytest.fixture(scope="session")
def ray_executor(ray_cluster: Any, ray_agents: tuple[str, Path]) -> Iterator[Any]:
    """The Ray executor on the session's cluster and agents (tests/conftest.py)."""
    from gpuyard.executors.ray.executor import RayExecutor

    namespace, node_home = ray_agents
    executor = RayExecutor(
        node_home / "control",
        address=ray_cluster.address,
        namespace=namespace,
        node_home=str(node_home),
        interface="lo",
    )
    yield executor
    executor.close()


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
    cleanup(executor, harness.launched)


def _ray(request: pytest.FixtureRequest) -> Iterator[Harness]:
    from gpuyard.executors.ray.executor import RayExecutor

    cluster = request.getfixturevalue("ray_cluster")
    executor: RayExecutor = request.getfixturevalue("ray_executor")
    # Two running nodes are enough (a node another test killed is started again only when
    # fewer are left: each start costs ~5 s of the Ray tests' 90).
    running = [name for name in sorted(cluster.nodes) if cluster.raylet(name) is not None]
    if len(running) < 2:
        cluster.ensure_nodes()
        running = sorted(cluster.nodes)
    deadline = time.monotonic() + 60
    while not set(running) <= {n.name for n in executor.nodes()}:
        assert time.monotonic() < deadline, executor.nodes()
        time.sleep(0.3)
    names = running

    def reopen() -> Executor:
        # A second control plane in this process: it knows no agent and finds them by name.
        return RayExecutor(
            executor.home,
            address=cluster.address,
            namespace=executor.namespace,
            node_home=executor.node_home,
            interface="lo",
        )

    # A node it kills is started again by the next test that needs it (ray_nodes_up).
    harness = Harness("ray", executor, names, reopen, cluster.kill_node)
    yield harness
    cleanup(executor, harness.launched)


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.slow)])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "local":
        yield from _local(request, tmp_path)
    else:
        yield from _ray(request)
