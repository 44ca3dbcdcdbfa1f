"""Issue 28 acceptance, end to end: data preparation on a real pool of two virtual nodes.

1. A 2-node job (torchrun, gloo) whose dataset mount asks for preparation: each node copies
   the version to its data cache first (a ``data`` event per node), and both ranks read the
   dataset at its workspace path, read-only, with the bytes of the version.
2. A second job on the same nodes starts without copying (the copies are used).
3. Once no job uses them, the copies are removed after the retention (a short one here, on
   the pool's clock: the inspection sweeps every second).
4. A node past its disk threshold is cordoned, with the reason, and takes no job.

Real processes throughout: `gpuyard up`, torchrun, gloo.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("data-preparation")]

RETENTION = 20
READ = """
import hashlib, json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
root = os.path.join(os.environ["GPUYARD_WORKSPACE"], "dataset", "data")
with open(os.path.join(root, "shards", "0.bin"), "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
try:
    open(os.path.join(root, "new"), "w").close()
    readonly = False
except OSError:
    readonly = True
same = torch.tensor([int(digest[:8], 16), int(readonly)], dtype=torch.int64)
dist.all_reduce(same)
print(json.dumps({"digest": digest, "readonly": readonly, "sum": same.tolist()}))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data-prep-shared")
    (root / "data" / "shards").mkdir(parents=True)
    (root / "data" / "shards" / "0.bin").write_bytes(os.urandom(3 << 20))
    (root / "data" / "index.json").write_text('{"shards": 1}\n')
    (root / "read.py").write_text(READ)
    return root


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("data-prep") / "home"
    pool = ServerProcess(
        home,
        "--virtual-nodes", "2", "--gpus-per-node", "1", "--cpus-per-node", "1",
        settings={
            "GPUYARD_INSPECT_INTERVAL": "1",
            "GPUYARD_DATASET_ROOTS": str(shared),
            "GPUYARD_DATA_RETENTION": str(RETENTION),
        },
    ).start()  # fmt: skip
    yield pool
    pool.stop()


def copies(pool: ServerProcess) -> list[Path]:
    """The nodes' copies in the pool's data cache."""
    return sorted(
        p for p in (pool.home / "data-cache").glob("*/v*") if p.is_dir() and "." not in p.name
    )


def data_events(pool: ServerProcess, job_id: int) -> list[str]:
    return [e.reason for e in pool.client.events(job_id) if e.kind == "data"]


def run_job(pool: ServerProcess, shared: Path) -> int:
    job = pool.cli_json(
        "submit",
        "--mode", "pytorch", "--nodes", "2", "--gpus", "1",
        "--dataset", "data@1", "--prepare-data",
        "--", sys.executable, str(shared / "read.py"),
    )  # fmt: skip
    mount = job["spec"]["mounts"]["datasets"][0]
    assert (mount["prepare"], mount["readonly"]) == (True, True)
    ended = pool.wait_status(int(job["id"]), {"succeeded", "failed", "stopped"}, timeout=180)
    assert ended["status"] == "succeeded", (ended.get("reason"), pool.log(int(job["id"])))
    return int(job["id"])


def test_prepared_data_is_read_copied_once_and_removed_after_its_retention(
    pool: ServerProcess, shared: Path
) -> None:
    pool.cli("datasets", "create", "data", "--from", str(shared / "data"), timeout=120)
    want = hashlib.sha256((shared / "data" / "shards" / "0.bin").read_bytes()).hexdigest()

    first = run_job(pool, shared)
    for rank in (0, 1):
        said = json.loads(pool.log(first, worker=rank).strip().splitlines()[-1])
        assert said["digest"] == want
        assert said["readonly"] is True
        assert said["sum"] == [2 * int(want[:8], 16), 2]  # both ranks read the same bytes
    events = data_events(pool, first)
    assert events[0].startswith("preparing data: ")
    prepared = [e for e in events if e.startswith("prepared dataset ")]
    assert len(prepared) == 2 and all("copied and verified" in e for e in prepared), events
    made = copies(pool)
    assert len(made) == 2  # one per node
    assert {p.parent.name for p in made} == {n["name"] for n in pool.cli_json("nodes")}
    for copy in made:
        assert hashlib.sha256((copy / "shards" / "0.bin").read_bytes()).hexdigest() == want

    second = run_job(pool, shared)
    used = data_events(pool, second)[1:]
    assert len(used) == 2 and all(e.endswith("its copy there is used") for e in used), used
    assert copies(pool) == made

    deadline = time.monotonic() + RETENTION + 30
    while copies(pool) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert copies(pool) == []


def test_a_node_past_its_disk_threshold_takes_no_job(tmp_path: Path) -> None:
    pool = ServerProcess(
        tmp_path / "home",
        "--virtual-nodes", "2", "--cpus-per-node", "1",
        settings={
            "GPUYARD_INSPECT_INTERVAL": "1",
            "GPUYARD_DISK_WARNING": "1.0",
            "GPUYARD_DISK_CRITICAL": "1.0",  # every disk is past it
        },
    ).start()  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            nodes = pool.cli_json("nodes")
            if all(n["state"] == "cordoned" for n in nodes):
                break
            time.sleep(0.5)
        assert all(n["state"] == "cordoned" for n in nodes), nodes
        assert all("disk" in (n["cordon_reason"] or "") for n in nodes), nodes
        job = pool.cli_json("submit", "--cpus", "1", "--", "true")
        time.sleep(3)
        assert pool.job(int(job["id"]))["status"] == "queued"
    finally:
        pool.stop()
