"""Acceptance of issue 2, end to end: crash-restart adoption, expiry, stop with SIGKILL."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = pytest.mark.slow


def _processes_running(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(marker in part for part in cmdline) and "sh" in Path(cmdline[0]).name:
            found.append(proc)
    return found


def test_a_crashed_pool_restarts_and_adopts_its_running_job(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    pool = pool_factory(home).start()
    runs = tmp_path / "runs"
    script = f"echo $$ >> {runs}; for i in $(seq 1 40); do echo line $i; sleep 0.5; done"
    job = pool.cli_json("submit", "--", "sh", "-c", script)
    assert job["status"] == "queued"
    job_id = job["id"]
    deadline = time.monotonic() + 30
    while "line 2" not in pool.log(job_id):
        assert time.monotonic() < deadline, pool.log_tail()
        time.sleep(0.1)

    pool.crash()  # SIGKILL to the whole process group of `gpuyard up`
    assert len(_processes_running(str(runs))) == 1  # the job did not die with it

    pool = pool_factory(home).start()
    shown = pool.cli_json("show", str(job_id))
    assert shown["status"] == "running"
    done = pool.wait_status(job_id, {"succeeded", "failed", "stopped", "expired"})
    assert done["status"] == "succeeded", done
    assert pool.cli("logs", str(job_id)).stdout == "".join(f"line {i}\n" for i in range(1, 41))
    assert len(runs.read_text().split()) == 1  # one process, never a duplicate
    transitions = [
        (e["from_state"], e["to_state"])
        for e in pool.cli_json("events", str(job_id))
        if e["kind"] == "transition"
    ]
    assert transitions == [
        ("queued", "starting"),
        ("starting", "running"),
        ("running", "succeeded"),
    ]


def test_max_runtime_expires_and_stop_escalates_to_sigkill(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    pool = pool_factory(tmp_path / "home", "--cpus-per-node", "8").start()
    expiring = pool.cli_json("submit", "--max-runtime", "2s", "--", "sleep", "60")["id"]
    trap = 'trap "echo SIGTERM ignored" TERM; echo ready; while true; do sleep 0.1; done'
    stubborn = pool.cli_json(
        "submit", "--graceful-shutdown", "2", "--name", "stubborn", "--", "bash", "-c", trap
    )["id"]
    deadline = time.monotonic() + 30
    while "ready" not in pool.log(stubborn):
        assert time.monotonic() < deadline, pool.log_tail()
        time.sleep(0.1)
    stop_at = time.monotonic()
    assert "stopping" in pool.cli("stop", str(stubborn)).stdout
    stopped = pool.wait_status(stubborn, {"stopped", "failed", "succeeded"})
    assert stopped["status"] == "stopped"
    assert time.monotonic() - stop_at >= 2  # it had its graceful period
    assert "SIGTERM ignored" in pool.cli("logs", str(stubborn)).stdout
    events = pool.cli_json("events", str(stubborn))
    reasons = " | ".join(e["reason"] for e in events)
    assert "SIGTERM sent to worker 0" in reasons
    assert "killed with SIGKILL" in reasons
    assert ("stopping", "stopped") in [(e["from_state"], e["to_state"]) for e in events]

    expired = pool.wait_status(expiring, {"expired", "failed", "succeeded", "stopped"})
    assert expired["status"] == "expired"
    assert expired["reason"] == "ran longer than its max runtime (2s)"
    kinds = [(e["kind"], e["to_state"]) for e in pool.cli_json("events", str(expiring))]
    assert ("transition", "expiring") in kinds and ("transition", "expired") in kinds
    assert ("signal", None) in kinds
    listing = pool.cli("ls", "--status", "expired").stdout
    assert "expired" in listing and "stubborn" not in listing
