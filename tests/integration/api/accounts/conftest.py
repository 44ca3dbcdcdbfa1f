"""For the accounts and submission-rule API tests: a pool of four fake nodes, an admin and a
plain user, and a picture of every table to prove that a refused request stored nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from gpuyard.client import Client
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.store.tables import (
    EventRow,
    GroupRow,
    JobRow,
    NodeRow,
    PoolRow,
    QuotaRow,
    UserRow,
    WorkerRow,
)
from gpuyard.testing.auth import AsUser, TokenFor

NODES = [
    NodeInfo("n0", "127.0.0.10", gpus=8, cpus=32, memory=256 << 30, labels={"zone": "z1"}),
    NodeInfo("n1", "127.0.0.11", gpus=8, cpus=32, memory=256 << 30, labels={"zone": "z1"}),
    NodeInfo("n2", "127.0.0.12", gpus=8, cpus=32, memory=256 << 30, labels={"zone": "z2"}),
    NodeInfo("n3", "127.0.0.13", gpus=8, cpus=32, memory=256 << 30, labels={"zone": "z2"}),
]

Refuse = Callable[..., dict[str, Any]]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # The pool runs as "root"; GPUYARD_ADMINS adds "ada". Everyone else is a plain user.
    return Settings(home=tmp_path / "home", user="root", admins=["ada"])


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor(NODES)


@pytest.fixture
def admin(as_user: AsUser) -> Client:
    return as_user("ada")


def store_picture(store: Store) -> dict[str, list[tuple[str, ...]]]:
    """Every row of every table the account and job rules write."""
    tables: dict[str, Any] = {
        "users": UserRow,
        "groups": GroupRow,
        "quotas": QuotaRow,
        "pools": PoolRow,
        "jobs": JobRow,
        "events": EventRow,
        "workers": WorkerRow,
        "nodes": NodeRow,
    }
    picture = {}
    with store.read() as session:
        for name, table in tables.items():
            rows = session.execute(select(*table.__table__.columns)).all()
            picture[name] = sorted(tuple(repr(v) for v in row) for row in rows)
    return picture


@pytest.fixture
def refuse(api_url: str, store: Store, token_for: TokenFor) -> Refuse:
    """``refuse(method, path, user=, status=, says=, json=)``: send a request that must be
    refused with ``status`` and a detail containing each of ``says``; check that the store is
    exactly as it was. Returns the body."""

    def call(
        method: str,
        path: str,
        *,
        user: str,
        status: int,
        says: str | list[str],
        json: Any = None,
    ) -> dict[str, Any]:
        token = token_for(user)
        before = store_picture(store)
        response = httpx.request(
            method,
            f"{api_url}/api/v1{path}",
            json=json,
            headers={"Authorization": f"Bearer {token}"},
        )
        body: dict[str, Any] = response.json()
        assert response.status_code == status, body
        for part in [says] if isinstance(says, str) else says:
            assert part in body["detail"], body["detail"]
        assert store_picture(store) == before
        return body

    return call
