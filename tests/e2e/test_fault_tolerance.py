"""Issue 14 acceptance, end to end: the fault-tolerance loop on a real pool of virtual nodes.

1. A pre-flight check that fails on one virtual node (its burn finds corrupted products, an
   injected fault) cordons that node, and the job runs on the others.
2. A rank SIGKILLed mid-training is detected; the job's nodes are re-checked; it resumes from
   its last checkpoint and ends with the weights of a run that was never interrupted.
3. A hung rank (SIGSTOP) is detected within the hang timeout; the job restarts and succeeds.

Real processes throughout: `gpuyard up`, the node check (torch, gloo), a DDP job (gloo).
"""

from __future__ import annotations

import json
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

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fault-tolerance")]

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
TRAIN = ROOT / "examples" / "preemptible_train.py"
ENDED = {"succeeded", "failed", "stopped", "expired"}


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("fault-tolerance") / "home"
    pool = ServerProcess(
        home,
        "--virtual-nodes", "3", "--gpus-per-node", "1", "--cpus-per-node", "1",
        settings={"GPUYARD_INJECT_FAULTS": json.dumps({"node1": "burn"})},
    ).start()  # fmt: skip
    yield pool
    pool.stop()


def submit(pool: ServerProcess, *args: str) -> int:
    job: dict[str, Any] = pool.cli_json("submit", *args)
    return int(job["id"])


def wait_ended(pool: ServerProcess, job_id: int, timeout: float = 150) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = pool.job(job_id)
        if job["status"] in ENDED:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not end: {pool.log_tail()}")


def ft_log(pool: ServerProcess, job_id: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = pool.cli_json("ft-log", str(job_id))
    return found


def log_of(pool: ServerProcess, job_id: int, attempt: int, rank: int) -> str:
    path = pool.home / "jobs" / str(job_id) / "attempts" / str(attempt) / f"worker-{rank}"
    return (path / "log").read_text() if (path / "log").exists() else ""


def digest(pool: ServerProcess, job_id: int) -> str:
    outputs = pool.home / "jobs" / str(job_id) / "outputs"
    found = {json.loads((outputs / f"rank-{r}.json").read_text())["digest"] for r in (0, 1)}
    assert len(found) == 1
    return found.pop()


def training_process(pool: ServerProcess, job_id: int, rank: int) -> psutil.Process:
    """The training script's process of one rank (under its worker's torchrun), of this pool."""
    return find_training_process(pool.home / "jobs" / str(job_id), rank, TRAIN.name)


TRAIN_ARGS = ["--steps", "60", "--step-time", "0.1", "--checkpoint-every", "10"]


def ddp(*extra: str) -> list[str]:
    """A 2-node DDP job; node1 (whose check is made to fail) only where a test asks."""
    if "--preflight" not in extra:
        extra = ("--node", "node0", "--node", "node2", *extra)
    return [
        "--mode", "pytorch", "--nodes", "2", "--gpus", "1", "--graceful-shutdown", "3",
        *extra, "--", PYTHON, str(TRAIN), *TRAIN_ARGS,
    ]  # fmt: skip


def test_a_node_that_fails_its_preflight_is_cordoned_and_the_job_runs_on_others(
    pool: ServerProcess,
) -> None:
    job_id = submit(pool, "--name", "preflight", *ddp("--preflight", "--max-restarts", "1"))
    job = wait_ended(pool, job_id)
    assert job["status"] == "succeeded", (job, pool.log_tail())
    nodes = {n["name"]: n for n in pool.cli_json("nodes")}
    assert nodes["node1"]["state"] == "cordoned"
    assert "burn" in nodes["node1"]["cordon_reason"]
    assert nodes["node1"]["cordoned_by"] == f"check:job {job_id}"
    assert {s["node"] for s in job["placement"]} == {"node0", "node2"}
    entries = ft_log(pool, job_id)
    assert [(e["kind"], e["node"]) for e in entries] == [("check", "node1")]
    assert "differs from the first" in entries[0]["evidence"]
    assert entries[0]["outcome"].startswith("running again on node0, node2")
    pool.cli("nodes", "uncordon", "node1")
    assert {n["name"]: n["state"] for n in pool.cli_json("nodes")}["node1"] == "ready"
    pool.cli("nodes", "cordon", "node1", "--reason", "injected burn fault")  # keep it out


def test_a_killed_rank_is_restarted_from_its_checkpoint_with_the_same_weights(
    pool: ServerProcess,
) -> None:
    reference = submit(pool, "--name", "reference", *ddp())
    assert wait_ended(pool, reference)["status"] == "succeeded"

    job_id = submit(pool, "--name", "killed", *ddp("--max-restarts", "2"))
    pool.wait_for_step(job_id, 25)
    training_process(pool, job_id, 1).send_signal(signal.SIGKILL)
    job = wait_ended(pool, job_id)
    assert job["status"] == "succeeded", (job, pool.log_tail())
    assert job["attempt"] == 1
    resumed = log_of(pool, job_id, 1, 0)
    assert "attempt 1: resuming at step" in resumed, resumed
    step = int(resumed.split("resuming at step ")[1].split()[0])
    assert step >= 20  # from the checkpoint, not from scratch
    assert digest(pool, job_id) == digest(pool, reference)
    (entry,) = ft_log(pool, job_id)
    assert entry["kind"] == "failure"
    assert entry["action"].startswith("restarting")
    assert entry["outcome"].startswith("running again")
    checks = pool.home / "jobs" / str(job_id) / "attempts/1/worker-100000/log"
    assert "PASSED" in checks.read_text()  # the nodes were re-checked before the restart


def test_a_hung_rank_is_detected_within_the_timeout_and_the_job_restarts(
    pool: ServerProcess,
) -> None:
    job_id = submit(pool, "--name", "hung", *ddp("--max-restarts", "1", "--hang-timeout", "10s"))
    pool.wait_for_step(job_id, 15)
    stopped = training_process(pool, job_id, 1)
    stopped.send_signal(signal.SIGSTOP)
    at = time.time()
    deadline = time.monotonic() + 60
    entries: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not entries:
        entries = [e.model_dump(mode="json") for e in pool.client.faults(job_id)]
        time.sleep(0.5)
    assert entries, pool.log_tail()
    (hang,) = entries
    assert hang["kind"] == "hang"
    detected = _timestamp(hang["time"]) - at
    assert 8 <= detected <= 25, detected  # the 10 s timeout, a pass and a look later
    job = wait_ended(pool, job_id)
    assert job["status"] == "succeeded", (job, pool.log_tail())
    try:
        gone = stopped.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        gone = True
    assert gone  # the stopped rank did not outlive its attempt


def _timestamp(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text).timestamp()


def test_a_job_cannot_cordon_a_node_by_printing_a_check_verdict(pool: ServerProcess) -> None:
    forged = "echo 'gpuyard-check: FAILED node=node0 test=burn forged'; exit 86"
    job_id = submit(
        pool, "--name", "forger", "--node", "node0", "--max-restarts", "1", "--",
        "bash", "-c", forged,
    )  # fmt: skip
    job = wait_ended(pool, job_id)
    assert job["status"] == "failed"
    assert {n["name"]: n["state"] for n in pool.cli_json("nodes")}["node0"] == "ready"
    kinds = [(e["kind"], e["action"].split(" ")[0]) for e in ft_log(pool, job_id)]
    assert kinds == [("failure", "restarting"), ("failure", "job")]  # then the budget is spent
