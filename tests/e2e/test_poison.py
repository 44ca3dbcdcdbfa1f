"""A job that writes garbage where the pool reads, against a real `gpuyard up`: every control
file the wrong shape, too large, and a forged exit record beside its control directory, over and
over. Other users' jobs start and finish meanwhile, the pool reports the bad files once as
events and keeps its health, and stays quiet (no busy loop); stopping the poison job leaves
nothing of it running."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = pytest.mark.slow

POISON = r"""
import json, os, pathlib, time
control = pathlib.Path(os.environ["GPUYARD_CONTROL_DIR"])
forged = {"exit_code": 0, "signal": None, "terminated": False, "escalated": False,
          "started_at": 1.0, "finished_at": 2.0}
while True:
    for name in ("ack.json", "checkpoint.json", "progress.json", "suspended.json"):
        (control / name).write_text("[3]")
    (control / "preempt.json").write_bytes(b"{" * (4 << 20))  # far past any cap
    (control.parent / "exit.json").write_text(json.dumps(forged))
    (control.parent / "state.json").write_text("[3]")
    time.sleep(0.05)
"""


def _cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def test_a_poison_job_breaks_nothing_and_costs_the_pool_little(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    pool = pool_factory(home, "--virtual-nodes", "2", "--gpus-per-node", "2").start()
    assert pool.proc is not None
    poison = pool.cli_json("submit", "--name", "poison", "--", sys.executable, "-c", POISON)
    try:
        _poisoned(pool, poison["id"], home)
    finally:
        # Workers outlive their pool by design: a failed run must not leave the poison behind.
        for proc in _of_pool(home):
            proc.kill()


def _of_pool(home: Path) -> list[psutil.Process]:
    """The processes of this pool's workers (their control dir is under its home)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("GPUYARD_CONTROL_DIR", "").startswith(str(home)):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _poisoned(pool: ServerProcess, poison: int, home: Path) -> None:
    assert pool.proc is not None
    pool.wait_status(poison, {"running"})
    time.sleep(1)  # its garbage is in place

    before, t0 = _cpu_seconds(pool.proc.pid), time.monotonic()
    for i in range(3):  # another user's jobs keep starting and finishing
        job = pool.cli_json("submit", "--name", f"ok-{i}", "--", "sh", "-c", "echo fine")
        done = pool.wait_status(job["id"], {"succeeded", "failed", "stopped"}, timeout=30)
        assert done["status"] == "succeeded", done
    time.sleep(3)  # the poison keeps writing while the pool idles
    share = (_cpu_seconds(pool.proc.pid) - before) / (time.monotonic() - t0)
    assert share < 0.20, f"gpuyard up used {share:.0%} of a core"

    health = pool.cli_json("health")
    assert health["status"] == "ok"
    assert health["controller"]["progressing"]
    shown = pool.cli_json("show", str(poison))
    assert shown["status"] == "running"  # its forged exit record changed nothing
    reported = [e["reason"] for e in pool.cli_json("events", str(poison))]
    ignored = [r for r in reported if "ignored a control file" in r]
    assert ignored, reported
    assert len(ignored) == len(set(ignored))  # each problem once, not once per read

    pool.cli("stop", str(poison))
    done = pool.wait_status(poison, {"stopped"}, timeout=60)
    assert done["status"] == "stopped"
    assert _of_pool(home) == []
