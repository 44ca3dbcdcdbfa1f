"""One job's output, or a full disk, does not stop the pool (docs/security.md#logs-and-disk-space).

A real ``gpuyard up`` whose home is a small tmpfs (the test is root and mounts it): a job prints
far more than the filesystem holds, and its log stays under the cap; another job then fills the
disk. The pool keeps answering (``/health`` says degraded and why, another user submits, stops
work), the node is cordoned for its disk, a job that exits meanwhile is recorded, and once
space is freed everything recovers by itself. On both databases (PostgreSQL's data lives
elsewhere; SQLite's in the full home, where the reserve is what lets it write).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuyard.testing.process import ServerProcess

MiB = 1 << 20
SIZE = 160 * MiB
LOG_MAX = 4 * MiB
RESERVE = 3 * MiB
FLOOD = "import sys\nwhile True:\n    sys.stdout.write('x' * 1023 + '\\n')\n"
FILL = (
    "import os, time\n"
    "path = os.path.join(os.environ['GPUYARD_JOB_DIR'], 'outputs', 'fill')\n"
    "fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)\n"
    "try:\n"
    "    while True:\n"
    "        os.write(fd, b'\\0' * (1 << 20))\n"
    "except OSError as exc:\n"
    "    print('full:', exc, flush=True)\n"
    "time.sleep(3600)\n"
)
"""Unbuffered: a buffered file would fail again when it is closed, and the job with it."""


@pytest.fixture
def small_home(mount_tmpfs: Callable[..., Path]) -> Path:
    return mount_tmpfs("home", size=SIZE, mode="0755")


def wait(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.2)


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def submit(self, *argv: str) -> httpx.Response:
        return self.http.post("/jobs", json={"command": shlex.join(argv)})

    def job(self, job_id: int) -> dict[str, Any]:
        answer = self.http.get(f"/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    def status(self, job_id: int) -> str:
        return str(self.job(job_id)["status"])


def test_a_flood_of_output_and_a_full_disk_leave_the_pool_answering(
    small_home: Path, database_url: str, pool_factory: type[ServerProcess]
) -> None:
    settings = {
        "GPUYARD_LOG_MAX": str(LOG_MAX),
        "GPUYARD_DISK_RESERVE": str(RESERVE),
        "GPUYARD_INSPECT_INTERVAL": "1",
    }
    if database_url.startswith("postgresql"):
        settings["GPUYARD_DATABASE_URL"] = database_url
    pool = pool_factory(small_home, settings=settings).start()
    owner = Api(pool.url, (small_home / "owner.token").read_text().strip())
    pool.cli("users", "add", "bob")
    bob = Api(pool.url, json.loads(pool.cli("tokens", "create", "bob", "--json").stdout)["token"])

    # A job prints far more than the whole filesystem holds: its log stays under the cap.
    scripts = small_home.parent
    (scripts / "flood.py").write_text(FLOOD)
    (scripts / "fill.py").write_text(FILL)
    flood = owner.submit(sys.executable, str(scripts / "flood.py")).json()["id"]
    log = small_home / "jobs" / str(flood) / "attempts/0/worker-0/log"

    def printed() -> int:
        return int(owner.http.get(f"/jobs/{flood}/logs", params={"limit": 1}).json()["size"])

    wait("the flood printed more than the home holds", lambda: printed() > 2 * SIZE, timeout=120)
    assert log.stat().st_size <= LOG_MAX
    head = owner.http.get(f"/jobs/{flood}/logs", params={"limit": 300}).json()
    assert head["offset"] > 0 and "bytes of the oldest output were dropped" in head["data"]
    health = owner.http.get("/health").json()
    assert health["status"] == "ok" and health["disk"]["reserve_held"] is True
    assert owner.http.post(f"/jobs/{flood}/stop").status_code == 200
    wait("the flood stopped", lambda: owner.status(flood) == "stopped")

    # Bob's job waits for a file; another job fills the disk, and keeps running.
    go = small_home.parent / "go"
    (scripts / "wait.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.1)\n"
    )
    waits = bob.submit(sys.executable, str(scripts / "wait.py")).json()["id"]
    wait("bob's job runs", lambda: bob.status(waits) == "running")
    filler = owner.submit(sys.executable, str(scripts / "fill.py")).json()["id"]
    health = wait(
        "/health says the disk is full",
        lambda: (
            (h := owner.http.get("/health")).status_code == 200
            and h.json()["status"] == "degraded"
            and h.json()
        ),
    )
    assert health["disk"]["status"] == "full" and "full" in health["reason"]
    assert not (small_home / "disk.reserve").exists()
    shown = pool.cli("health", check=False)
    assert shown.returncode == 1 and "RELEASED" in shown.stdout, shown.stdout
    node = wait(
        "the node is cordoned for its disk",
        lambda: [
            n for n in owner.http.get("/nodes").json() if n["cordoned_by"] == "inspection (disk)"
        ],
    )[0]
    assert "nearly full" in node["cordon_reason"]
    # While it is full: bob's job exits and is recorded, bob submits, the filler is stopped.
    go.touch()
    wait("bob's job is recorded as succeeded", lambda: bob.status(waits) == "succeeded")
    answer = bob.submit("true")
    assert answer.status_code == 201, answer.text
    later = answer.json()["id"]
    assert owner.status(filler) == "running"
    assert owner.http.post(f"/jobs/{filler}/stop").status_code == 200
    wait("the filler stopped", lambda: owner.status(filler) == "stopped")
    assert owner.http.get("/health").status_code == 200

    # Space is freed: the reserve comes back, the node is uncordoned, /health is ok, and the
    # job submitted meanwhile runs.
    (small_home / "jobs" / str(filler) / "outputs" / "fill").unlink()
    wait("/health is ok again", lambda: owner.http.get("/health").json()["status"] == "ok")
    assert (small_home / "disk.reserve").stat().st_size == RESERVE
    wait(
        "the node is uncordoned",
        lambda: all(n["state"] == "ready" for n in owner.http.get("/nodes").json()),
    )
    wait("the job submitted while full ran", lambda: bob.status(later) == "succeeded")
    assert shutil.disk_usage(small_home).free > SIZE // 2
