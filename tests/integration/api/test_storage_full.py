"""A write that finds the disk full is a clear 503 (``storage_full``) that changes nothing, not a
500, and writes work again once space is freed (docs/security.md#logs-and-disk-space).

SQLite on a real, size-limited tmpfs (the test is root and mounts it). PostgreSQL's disk is
its server's, not one a test can fill: its ``disk_full`` (SQLSTATE 53100) is recognised by the
same code (:mod:`gpuyard.store.full`), and the log-flood e2e runs the pool on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from gpuyard.client import Client
from gpuyard.errors import StorageFull
from gpuyard.executors.fake import FakeExecutor
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.auth import user_token
from gpuyard.testing.server import serve


@pytest.fixture
def small_disk(mount_tmpfs: Callable[..., Path]) -> Path:
    return mount_tmpfs("disk", size="16m")


def fill(path: Path) -> None:
    """Write ``path`` until the filesystem has no room left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass  # unbuffered: nothing is left to flush (and fail) at close
    finally:
        os.close(fd)


def test_a_write_on_a_full_disk_is_a_503_and_works_again_once_space_is_freed(
    small_disk: Path, tmp_path: Path
) -> None:
    store = Store(f"sqlite:///{small_disk / 'gpuyard.db'}")
    store.migrate()
    released: list[bool] = []
    store.on_full.append(lambda: released.append(True))
    app = create_app(Settings(home=tmp_path / "home"), store=store, executor=FakeExecutor())
    try:
        with serve(app) as url:
            token = user_token(app, "alice")
            http = httpx.Client(
                base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
            assert http.post("/jobs", json={"command": "sleep 1"}).status_code == 201
            fill(small_disk / "filler")
            answers = [http.post("/jobs", json={"command": "sleep 1"}) for _ in range(40)]
            codes = {a.status_code for a in answers}
            assert 500 not in codes
            assert 503 in codes, codes
            refused = next(a for a in answers if a.status_code == 503).json()
            assert refused["code"] == "storage_full"
            assert "storage is full" in refused["detail"]
            assert released, "the store did not say that the disk is full"
            with Client(url, token=token) as client, pytest.raises(StorageFull):
                for _ in range(40):
                    client.submit({"command": "sleep 1"})
            assert http.get("/health").status_code == 200
            (small_disk / "filler").unlink()
            assert http.post("/jobs", json={"command": "sleep 1"}).status_code == 201
    finally:
        store.close()
