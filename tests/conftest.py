"""Shared fixtures: both databases, a manual clock, the API over real HTTP."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.image import ImageRef
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing import pyimage
from gpuyard.testing.auth import AsUser, TokenFor, user_token
from gpuyard.testing.postgres import PostgresServer, postgres_server, unavailable_reason
from gpuyard.testing.registry import PushedImage, TestRegistry, registry_server
from gpuyard.testing.registry import unavailable_reason as registry_unavailable
from gpuyard.testing.server import serve


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Never touch the developer's own pool: every test gets an empty home and no server URL.
    for key in list(os.environ):
        if key.startswith("GPUYARD_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GPUYARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUYARD_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with postgres_server() as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpuyard.db'}"
        return
    server: PostgresServer = request.getfixturevalue("pg_server")
    url = server.create_database()
    yield url
    server.drop_database(url)


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = Store(database_url)
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor()


@pytest.fixture
def controller(store: Store, fake_executor: FakeExecutor, clock: ManualClock) -> Controller:
    """The real controller over the test's store and executor, its nodes registered (the
    default fake executor's: one node, 8 GPUs, 64 CPUs, 1 TiB)."""
    controller = Controller(store, fake_executor, clock=clock)
    controller.register_nodes()
    return controller


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


@pytest.fixture
def app(settings: Settings, store: Store, fake_executor: FakeExecutor, clock: ManualClock) -> Any:
    """The real API app on the test's store and a fake executor."""
    return create_app(settings, store=store, executor=fake_executor, clock=clock)


@pytest.fixture
def api_url(app: Any) -> Iterator[str]:
    """The app, served over HTTP."""
    with serve(app) as url:
        yield url


@pytest.fixture
def token_for(app: Any) -> TokenFor:
    """``token_for(name, admin=False, group=None)``: a token of that user (created if new)."""

    def make(name: str, *, admin: bool = False, group: str | None = None) -> str:
        return user_token(app, name, admin=admin, group=group)

    return make


@pytest.fixture
def as_user(api_url: str, token_for: TokenFor) -> Iterator[AsUser]:
    """``as_user(name, admin=False, group=None)``: a Client signed in as that user."""
    clients: list[Client] = []

    def make(name: str, *, admin: bool = False, group: str | None = None) -> Client:
        client = Client(api_url, token=token_for(name, admin=admin, group=group))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(as_user: AsUser) -> Client:
    """Signed in as alice, a plain user."""
    return as_user("alice")


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``mount_tmpfs(name, size=..., mode=None)``: a size-limited tmpfs mounted on a new
    directory ``name`` of the test's tmp_path (``size`` and ``mode`` as mount's options take
    them), unmounted after the test. Skips the test where it cannot mount one (not root)."""
    mounted: list[Path] = []

    def mount(name: str, *, size: int | str, mode: str | None = None) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a size-limited tmpfs needs root")
        where = tmp_path / name
        where.mkdir()
        options = f"size={size}" if mode is None else f"size={size},mode={mode}"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
        mounted.append(where)
        return where

    try:
        yield mount
    finally:
        for where in reversed(mounted):
            subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Ray cluster on this machine for the whole session: a head on 127.0.0.1 and nodes
    node1..node3 on 127.0.0.2..4, 2 fake GPUs each (gpuyard.testing.raycluster). Tests that
    use it are in the xdist group "ray", so one worker starts it once. Skipped, saying why,
    only when Ray cannot start here."""
    from gpuyard.testing import raycluster

    reason = raycluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("ray") / "ray-start.log"
    context = raycluster.ray_cluster(3, log=log)
    try:
        cluster = context.__enter__()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"a Ray test cluster cannot start here: {exc}")
    close = _once(lambda: context.__exit__(None, None, None))
    close_after_group("ray", close)
    try:
        yield cluster
    finally:
        close()


@pytest.fixture(scope="session")
def ray_agents(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One namespace of node agents and one node home for every Ray test of the session: an
    agent (a fresh Ray worker process) costs seconds to start on this machine, so tests share
    them (job ids differ: the pools' count from 1, the conformance suite's from far above).
    Yields (namespace, node home); the agents are killed at the end."""
    node_home = tmp_path_factory.mktemp("ray-node")

    def shutdown() -> None:
        import ray

        from gpuyard.executors.ray.executor import RayExecutor

        RayExecutor(
            node_home, address=ray_cluster.address, namespace="gpuyard-tests", connect=False
        ).shutdown_agents()
        ray.shutdown()

    close = _once(shutdown)
    close_after_group("ray", close)
    yield "gpuyard-tests", node_home
    close()


@pytest.fixture
def ray_nodes_up(ray_cluster: Any) -> Any:
    """The session's Ray cluster with every node running (one a test killed is started
    again: a new Ray node of the same name)."""
    ray_cluster.ensure_nodes()
    return ray_cluster


def _groups(item: pytest.Item | None) -> set[str]:
    """The ``xdist_group`` names of ``item``."""
    if item is None:
        return set()
    return {
        str(m.args[0] if m.args else m.kwargs.get("name", "default"))
        for m in item.iter_markers("xdist_group")
    }


_AFTER_GROUP: dict[str, list[Callable[[], None]]] = {}


def _once(close: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def once() -> None:
        if not done:
            done.append(True)
            close()

    return once


def close_after_group(group: str, close: Callable[[], None]) -> None:
    """Run ``close`` once the last test of the xdist group ``group`` in this process has
    ended, not at the end of the session: a group's tests run one after the other in one
    process (``--dist loadgroup``, and :func:`pytest_collection_modifyitems` without xdist),
    and a session fixture only they use (the Ray test cluster, about a tenth of a core while
    it idles) would otherwise load the machine for every test after them. Closers run last
    registered first; ``close`` must be safe to call again (the fixture's own teardown)."""
    _AFTER_GROUP.setdefault(group, []).append(close)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    for group in _groups(item) - _groups(nextitem):
        for close in reversed(_AFTER_GROUP.pop(group, [])):
            close()


def _contiguous_groups(items: list[pytest.Item]) -> None:
    """Each xdist group's tests together, where its first test was (as loadgroup runs them)."""
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        for group in sorted(_groups(item))[:1]:
            first.setdefault(group, index)
    order = {
        id(item): (first[min(g)] if (g := _groups(item)) else i, i) for i, item in enumerate(items)
    }
    items.sort(key=lambda item: order[id(item)])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each xdist group's tests together (:func:`close_after_group`), and make
    ``xdist_group`` marks group again under ``--dist loadgroup``: pytest-xdist 3.8
    suffixes a grouped test's node id by setting ``item._nodeid``, which pytest 9 no longer
    reads (the id lives in ``item._id``), so every group was spread over the workers (two
    Ray test clusters, two distributed pools at once). Same suffix, where pytest 9 reads it."""
    _contiguous_groups(items)
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        names = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = coerce_node_id(item.nodeid + suffix)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def registry() -> Iterator[TestRegistry]:
    """One OCI registry (Debian's docker-registry, TLS, users alice and bob) per test process,
    for the image tests (docs/images.md)."""
    reason = registry_unavailable()
    if reason:
        pytest.skip(reason)
    with registry_server() as server:
        yield server


@pytest.fixture(scope="session")
def python_image(registry: TestRegistry) -> PushedImage:
    """``alice/pytorch:1``: Debian's Python with torch, numpy, mpi4py, Open MPI and the
    examples (in ``/opt/examples``), built from
    this machine's files (:mod:`gpuyard.testing.pyimage`; cached on disk under ``.cache/``) and
    pushed once per test process."""
    reason = pyimage.unavailable_reason()
    if reason:
        pytest.skip(reason)
    root = Path(__file__).resolve().parents[1]
    # The examples in the image too: an MPI job's ranks on every node find them at one path.
    examples = {f"opt/examples/{p.name}": p for p in (root / "examples").glob("*.py")}
    layout = pyimage.build_python_image(root / ".cache/test-images", examples)
    ref = ImageRef.parse("alice/pytorch:1")
    with registry.client("alice") as client:
        digest = client.push(layout, ref)
    return PushedImage(ref, digest, layout)
