"""A fork bomb in a job stops at its worker's process cap, under the machine's ceiling, and the
pool keeps answering (issue 24, point 7; docs/security.md, "Limits")."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

from gpuyard.executors.local import cgroups
from gpuyard.testing.process import ServerProcess

pytestmark = pytest.mark.slow

BOMB = """
import os, sys, time
go = sys.argv[1]
children = 0
while children < 500:
    try:
        pid = os.fork()
    except BlockingIOError:  # EAGAIN: the cap
        break
    if pid == 0:
        while not os.path.exists(go):
            time.sleep(0.2)
        os._exit(0)
    children += 1
print(f"forked {children}", flush=True)
while not os.path.exists(go):
    time.sleep(0.1)
sys.exit(3)
"""


@pytest.fixture(scope="module")
def pids_controller() -> None:
    found = cgroups.detect(f"gpuyard-probe-{uuid.uuid4().hex[:8]}")
    found.remove_parents()
    if "pids" not in found.controllers:
        pytest.skip(f"no pids controller this pool may use here: {found.warnings}")


def wait_for(pool: ServerProcess, job_id: int, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = pool.log(job_id)
        if text in log:
            return log
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in the log of job {job_id}: {log}")
        time.sleep(0.2)


def test_a_fork_bomb_stops_at_its_cap_and_the_pool_keeps_answering(
    pool_factory: type[ServerProcess], tmp_path: Path, pids_controller: None
) -> None:
    settings = {"GPUYARD_PIDS_PER_WORKER": "40", "GPUYARD_PIDS_CEILING": "200"}
    pool = pool_factory(tmp_path / "home", settings=settings).start()
    assert "isolation of each worker: cgroup-" in pool.log_tail()
    script, go = tmp_path / "bomb.py", tmp_path / "go"
    script.write_text(BOMB)
    bomb = pool.cli_json("submit", "--", sys.executable, str(script), str(go))
    forked = int(wait_for(pool, bomb["id"], "forked").split("forked ")[1].split()[0])
    assert 0 < forked < 40  # its own process counts too
    # While the bomb holds its cap, the pool answers and runs another job.
    [node] = pool.cli_json("nodes")
    assert "pids" in node["isolation"]["enforced"]
    assert node["isolation"]["pids_ceiling"] == 200
    other = pool.cli_json("submit", "--", "echo", "still here")
    assert pool.cli("wait", str(other["id"]), timeout=120).returncode == 0
    assert "still here" in pool.cli("logs", str(other["id"])).stdout
    go.touch()
    done = pool.wait_status(bomb["id"], {"failed", "succeeded"}, timeout=120)
    assert done["status"] == "failed"
    assert "reached its limit of 40 processes" in pool.cli("show", str(bomb["id"])).stdout
