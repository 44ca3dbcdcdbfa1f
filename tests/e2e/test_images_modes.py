"""Issue 26 point 5, end to end: the launch modes inside an image (docs/images.md, "Launch
modes in an image"). One real `gpuyard up` of two virtual nodes whose registry holds
``alice/pytorch:1`` (Debian's Python, torch, mpi4py and Open MPI, :mod:`gpuyard.testing.pyimage`);
the examples' scripts reach the job as its code directory (``--algorithm``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess
from gpuyard.testing.registry import PushedImage, TestRegistry

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("images_modes"),
    pytest.mark.skipif(os.geteuid() != 0, reason="workers in an image need a pool run by root"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def pool(
    tmp_path_factory: pytest.TempPathFactory, registry: TestRegistry, python_image: PushedImage
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("images-modes") / "home"
    settings = {
        "GPUYARD_REGISTRY": registry.url,
        "GPUYARD_REGISTRY_CA": str(registry.ca_file),
        "GPUYARD_REGISTRY_USER": "alice",
        "GPUYARD_REGISTRY_PASSWORD": registry.users["alice"],
    }
    args = ("--virtual-nodes", "2", "--gpus-per-node", "2", "--cpus-per-node", "8")
    pool = ServerProcess(home, *args, settings=settings).start()
    yield pool
    pool.stop()


def run(pool: ServerProcess, *args: str, timeout: float = 240) -> dict[str, object]:
    job = pool.cli_json("submit", "--image", "alice/pytorch:1", "--algorithm", str(EXAMPLES), *args)
    done = pool.wait_status(job["id"], {"succeeded", "failed", "stopped", "expired"}, timeout)
    assert done["status"] == "succeeded", (done, pool.cli("logs", str(job["id"])).stdout[-3000:])
    return done


def test_ddp_two_nodes_by_two_processes_trains_in_the_image(pool: ServerProcess) -> None:
    job = run(
        pool,
        "--mode",
        "pytorch",
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--",
        "python",
        "algorithm/ddp_train.py",
    )
    outputs = pool.home / "jobs" / str(job["id"]) / "outputs"
    results = [json.loads((outputs / f"rank-{r}.json").read_text()) for r in range(4)]
    assert len({r["digest"] for r in results}) == 1  # every rank: identical weights
    losses = results[0]["losses"]
    assert isinstance(losses, list) and losses[-1] < losses[0] / 100
    assert {w["node"] for w in job["workers"]} == {"node0", "node1"}  # type: ignore[union-attr]
    log = pool.cli("logs", str(job["id"])).stdout
    assert "4 ranks on 2 nodes: weights identical" in log
