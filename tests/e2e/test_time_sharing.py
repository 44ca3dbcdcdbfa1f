"""Issue 4 acceptance, end to end: real time-sharing on a real pool of two virtual nodes.

1. A low-tier 2-worker PyTorch job (gloo) that checkpoints through gpuyard.runtime fills the
   pool; a high-tier job arrives; the low job gets the notice, saves and suspends; the high job
   runs; the low job resumes from its checkpoint and ends with the weights of a run that was
   never interrupted.
2. A job that ignores the notice is SIGKILLed after its graceful period and requeued at its
   original position, and its events say so.
3. A pause (issue 29): `gpuyard suspend --hold` keeps a torchrun job suspended, its event says
   it was suspended, and `gpuyard resume` lets it finish from its checkpoint.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuyard.testing.process import ServerProcess
from gpuyard.testing.waits import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("time-sharing")]

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
TRAIN = ROOT / "examples" / "preemptible_train.py"
ENDED = {"succeeded", "failed", "stopped", "expired"}


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("time-sharing") / "home"
    pool = ServerProcess(
        home, "--virtual-nodes", "2", "--gpus-per-node", "1", "--cpus-per-node", "1"
    ).start()
    pool.cli("pools", "add", "default", "--preemption", "suspend", "--notice", "60s")
    yield pool
    pool.stop()


def submit(pool: ServerProcess, *args: str) -> int:
    job: dict[str, Any] = pool.cli_json("submit", *args)
    return int(job["id"])


def events(pool: ServerProcess, job_id: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = pool.cli_json("events", str(job_id))
    return found


def digest(pool: ServerProcess, job_id: int) -> str:
    outputs = pool.home / "jobs" / str(job_id) / "outputs"
    digests = {json.loads((outputs / f"rank-{r}.json").read_text())["digest"] for r in (0, 1)}
    assert len(digests) == 1  # both ranks end with the same weights
    return digests.pop()


def test_a_high_job_takes_the_pool_and_the_low_one_resumes_with_the_same_weights(
    pool: ServerProcess,
) -> None:
    train = [
        "--mode", "pytorch", "--nodes", "2", "--gpus", "1", "--priority", "low", "--",
        PYTHON, str(TRAIN), "--steps", "160", "--step-time", "0.05",
    ]  # fmt: skip
    reference = submit(pool, "--name", "reference", *train)
    assert pool.wait_status(reference, ENDED, 180)["status"] == "succeeded"

    low = submit(pool, "--name", "low", *train)
    pool.wait_for_step(low, 15)
    high = submit(
        pool, "--name", "high", "--priority", "high", "--nodes", "2", "--gpus", "1", "--",
        PYTHON, "-c", "print('high ran')",
    )  # fmt: skip
    assert pool.wait_status(high, ENDED, 180)["status"] == "succeeded"
    done = pool.wait_status(low, ENDED, 180)
    assert done["status"] == "succeeded", pool.cli("logs", str(low)).stdout[-3000:]
    assert (done["attempt"], done["suspensions"]) == (1, 1)

    # Suspended mid-run, resumed from its checkpoint: the same weights as never interrupted.
    assert digest(pool, low) == digest(pool, reference)
    first = pool.cli("logs", str(low), "--attempt", "0").stdout
    second = pool.cli("logs", str(low)).stdout
    assert "preempted (suspended to make room for job" in first
    assert "attempt 1: resuming at step" in second

    log = events(pool, low)
    kinds = [e["kind"] for e in log]
    assert {"notice", "acknowledged", "checkpoint"} <= set(kinds)
    assert kinds.count("acknowledged") == 2  # both workers
    moves = [(e["from_state"], e["to_state"]) for e in log if e["kind"] == "transition"]
    for move in [("running", "suspending"), ("suspending", "suspended"), ("suspended", "starting")]:
        assert move in moves
    [why] = [e["reason"] for e in log if e["to_state"] == "suspending"]
    assert why.startswith(f"suspended to make room for job {high} (a higher priority)")


def test_a_job_that_ignores_the_notice_is_killed_and_requeued_at_its_place(
    pool: ServerProcess, tmp_path: Path
) -> None:
    pool.cli("pools", "set", "default", "--notice", "3s")
    stubborn_file = tmp_path / "stubborn.yaml"
    stubborn_file.write_text(
        "name: stubborn\npriority: low\nnodes: 2\nresources: {gpus: 1}\ngraceful_shutdown: 2\n"
        f'command: {PYTHON} -c "import signal, time; signal.signal(signal.SIGTERM, '
        "signal.SIG_IGN); print('ignoring everything', flush=True); time.sleep(600)\"\n"
    )
    stubborn = submit(pool, "-f", str(stubborn_file))
    pool.wait_status(stubborn, {"running"}, 60)
    later = submit(pool, "--name", "later", "--priority", "low", "--nodes", "2", "--gpus", "1",
                   "--", "sleep", "1")  # fmt: skip
    high = submit(pool, "--name", "high2", "--priority", "high", "--nodes", "2", "--gpus", "1",
                  "--", "sleep", "2")  # fmt: skip
    assert pool.wait_status(high, ENDED, 120)["status"] == "succeeded"
    # Requeued at its original position: it runs again before `later`, submitted after it.
    again = pool.wait_status(stubborn, {"running"}, 60)
    assert again["attempt"] == 1
    assert pool.cli_json("show", str(later))["status"] == "queued"

    log = events(pool, stubborn)
    suspended = [e for e in log if e["to_state"] == "suspended"]
    assert len(suspended) == 1
    assert "did not exit by the deadline and was SIGKILLed" in suspended[0]["reason"]
    assert "is lost" in suspended[0]["reason"]
    signals = [e["reason"] for e in log if e["kind"] == "signal"]
    assert any("SIGTERM" in s for s in signals)
    assert not any(e["kind"] == "acknowledged" for e in log)
    exits = [e["reason"] for e in log if e["kind"] == "worker_exited"]
    assert any("SIGKILL" in r for r in exits)
    # `later` first, while `stubborn` still holds the nodes: stopped the other way round,
    # `later` starts at once and its `sleep 1` may have ended before its stop arrives.
    pool.cli("stop", str(later))
    pool.cli("stop", str(stubborn))
    pool.cli("pools", "set", "default", "--notice", "60s")


def test_suspend_hold_pauses_a_torchrun_job_until_resume(pool: ServerProcess) -> None:
    job = submit(
        pool, "--name", "paused", "--mode", "pytorch", "--nodes", "1", "--gpus", "1", "--",
        PYTHON, str(TRAIN), "--steps", "200", "--step-time", "0.05",
    )  # fmt: skip
    pool.wait_for_step(job, 10)
    assert pool.cli("suspend", "--hold", str(job)).stdout == f"job {job}: suspending, held\n"
    wait_until(lambda: pool.cli_json("show", str(job))["state"] == "suspended", timeout=120)
    shown = pool.cli_json("show", str(job))
    assert (shown["on_hold"], shown["attempt"], shown["wait_code"]) == (True, 1, "held")
    # A clean suspension reads as one although torchrun turned the rank's 75 into its 1.
    [exited] = [e["reason"] for e in events(pool, job) if e["kind"] == "worker_exited"]
    assert "was suspended: it checkpointed and exited to be requeued" in exited, exited
    assert "launcher exited with code 1" in exited, exited
    assert pool.cli("resume", str(job)).stdout == f"job {job}: released, suspended\n"
    done = pool.wait_status(job, ENDED, 180)
    assert (done["status"], done["attempt"]) == ("succeeded", 1)
    assert "attempt 1: resuming at step" in pool.cli("logs", str(job)).stdout
