"""Shared fixtures: both databases, a manual clock, the API over real HTTP."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.executors.fake import FakeExecutor
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.postgres import PostgresServer, postgres_server, unavailable_reason
from gpuyard.testing.server import serve


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Never touch the developer's own pool: every test gets an empty home and no server URL.
    for key in list(os.environ):
        if key.startswith("GPUYARD_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GPUYARD_HOME", str(tmp_path / "home"))


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
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


@pytest.fixture
def api_url(
    settings: Settings, store: Store, fake_executor: FakeExecutor, clock: ManualClock
) -> Iterator[str]:
    """The real API app, served over HTTP, on the test's store and a fake executor."""
    app = create_app(settings, store=store, executor=fake_executor, clock=clock)
    with serve(app) as url:
        yield url


@pytest.fixture
def client(api_url: str) -> Iterator[Client]:
    with Client(api_url, user="alice") as client:
        yield client
