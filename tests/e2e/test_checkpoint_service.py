"""Issue 28 acceptance, end to end: the checkpoint service on a real pool of two virtual nodes.

1. A 2-rank DDP job (gloo) saves through the service every step, one rank is SIGKILLed, the
   job restarts in place and resumes from the newest complete step in node memory, ending with
   the weights of a run that was never interrupted.
2. `gpuyard resume JOB --from STEP` of a suspended job resumes it from that step's weights.
3. A job's node memory is freed once it has ended.

Real processes throughout: `gpuyard up`, torchrun, gloo, the persister.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuyard.testing.process import ServerProcess
from gpuyard.testing.process import training_process as find_training_process

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("checkpoint-service")]

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "flash_train.py"
ENDED = {"succeeded", "failed", "stopped", "expired"}


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("checkpoint-service") / "home"
    pool = ServerProcess(
        home,
        "--virtual-nodes", "2", "--gpus-per-node", "1", "--cpus-per-node", "1",
        settings={"GPUYARD_INSPECT_INTERVAL": "2"},
    ).start()  # fmt: skip
    yield pool
    pool.stop()


def job_args(steps: int, *extra: str, step_time: float = 0.1) -> list[str]:
    return [
        "--mode", "pytorch", "--nodes", "2", "--gpus", "1", "--graceful-shutdown", "3", *extra,
        "--", sys.executable, str(TRAIN), "--steps", str(steps), "--step-time", str(step_time),
    ]  # fmt: skip


def submit(pool: ServerProcess, *args: str) -> int:
    job: dict[str, Any] = pool.cli_json("submit", *args)
    return int(job["id"])


def wait_ended(pool: ServerProcess, job_id: int, timeout: float = 180) -> dict[str, Any]:
    return pool.wait_status(job_id, ENDED, timeout=timeout)


def outputs(pool: ServerProcess, job_id: int) -> Path:
    return pool.home / "jobs" / str(job_id) / "outputs"


def final_digest(pool: ServerProcess, job_id: int) -> str:
    import json

    found = {
        json.loads((outputs(pool, job_id) / f"rank-{r}.json").read_text())["digest"] for r in (0, 1)
    }
    assert len(found) == 1
    return found.pop()


def step_digests(pool: ServerProcess, job_id: int) -> dict[int, str]:
    lines = (outputs(pool, job_id) / "steps.txt").read_text().split()
    return {int(step): digest for step, digest in zip(lines[::2], lines[1::2], strict=True)}


def attempt_log(pool: ServerProcess, job_id: int, attempt: int, rank: int = 0) -> str:
    path = pool.home / "jobs" / str(job_id) / "attempts" / str(attempt) / f"worker-{rank}" / "log"
    return path.read_text() if path.exists() else ""


def training_process(pool: ServerProcess, job_id: int, rank: int) -> psutil.Process:
    return find_training_process(pool.home / "jobs" / str(job_id), rank, TRAIN.name)


@pytest.fixture(scope="module")
def reference(pool: ServerProcess) -> int:
    job_id = submit(pool, "--name", "reference", *job_args(40))
    job = wait_ended(pool, job_id)
    assert job["status"] == "succeeded", (job, pool.log_tail())
    return job_id


def test_a_killed_rank_resumes_in_place_from_node_memory_with_the_same_weights(
    pool: ServerProcess, reference: int
) -> None:
    job_id = submit(pool, "--name", "killed", *job_args(40, "--max-restarts", "2"))
    pool.wait_for_step(job_id, 15)
    memory = pool.home / "memory"
    assert any(memory.glob(f"*/{job_id}/rank-*.slot-*"))  # saved into node memory
    training_process(pool, job_id, 1).send_signal(signal.SIGKILL)
    job = wait_ended(pool, job_id)
    assert job["status"] == "succeeded", (job, pool.log_tail())
    assert job["attempt"] == 1
    resumed = attempt_log(pool, job_id, 1)
    assert "from memory" in resumed, resumed
    step = int(resumed.split("resuming at step ")[1].split()[0])
    assert step >= 15
    assert resumed.split("weights ")[1].split()[0] == step_digests(pool, reference)[step]
    assert final_digest(pool, job_id) == final_digest(pool, reference)
    listing = pool.cli_json("checkpoints", str(job_id))
    assert listing["checkpoints"][-1]["step"] == 40
    assert "storage" in listing["checkpoints"][-1]["held"]
    # Ended: its node memory is freed by the next inspection.
    deadline = time.monotonic() + 30
    while any(memory.glob(f"*/{job_id}")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(memory.glob(f"*/{job_id}")), pool.log_tail()


def test_resume_from_a_chosen_step_gives_that_steps_weights(
    pool: ServerProcess, reference: int
) -> None:
    job_id = submit(pool, "--name", "chosen", *job_args(40, step_time=0.5))
    pool.wait_for_step(job_id, 12)
    pool.cli("suspend", "--hold", str(job_id))
    deadline = time.monotonic() + 60
    while pool.job(job_id)["state"] != "suspended":  # held: its status says queued
        assert time.monotonic() < deadline, pool.job(job_id)
        time.sleep(0.3)
    listing = pool.cli_json("checkpoints", str(job_id))
    steps = [c["step"] for c in listing["checkpoints"]]
    assert steps, listing
    chosen = steps[0]
    refused = pool.cli("resume", str(job_id), "--from", "999999", check=False)
    assert refused.returncode != 0 and "no complete checkpoint at step 999999" in refused.stderr
    pool.cli("resume", str(job_id), "--from", str(chosen))
    job = wait_ended(pool, job_id)
    assert job["status"] == "succeeded", (job, pool.log_tail())
    resumed = attempt_log(pool, job_id, job["attempt"])
    assert f"resuming at step {chosen} " in resumed, resumed
    assert resumed.split("weights ")[1].split()[0] == step_digests(pool, reference)[chosen]
    assert final_digest(pool, job_id) == final_digest(pool, reference)
