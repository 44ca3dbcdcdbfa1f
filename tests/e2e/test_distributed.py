"""Issue 3 acceptance, end to end: real multi-node jobs on two virtual nodes."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("distributed")]

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DDP = ROOT / "examples" / "ddp_train.py"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("distributed") / "home"
    pool = ServerProcess(
        home, "--virtual-nodes", "2", "--gpus-per-node", "2", "--cpus-per-node", "8"
    ).start()
    yield pool
    pool.stop()


def run(pool: ServerProcess, *args: str, timeout: float = 180) -> dict[str, object]:
    job = pool.cli_json("submit", *args)
    done = pool.wait_status(job["id"], {"succeeded", "failed", "stopped", "expired"}, timeout)
    assert done["status"] == "succeeded", (done, pool.cli("logs", str(job["id"])).stdout[-3000:])
    return done


def ranks(pool: ServerProcess, job: dict[str, object]) -> list[dict[str, object]]:
    outputs = pool.home / "jobs" / str(job["id"]) / "outputs"
    return [json.loads((outputs / f"rank-{r}.json").read_text()) for r in range(4)]


def test_pytorch_ddp_two_nodes_by_two_processes_wrapped_and_torchrun(pool: ServerProcess) -> None:
    wrapped = run(pool, "--mode", "pytorch", "--nodes", "2", "--gpus", "2", "--", PYTHON, str(DDP))
    torchrun = str(Path(PYTHON).parent / "torchrun")
    explicit = run(
        pool,
        "--mode",
        "pytorch",
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--",
        f"{torchrun} --nnodes ${{WORLD_SIZE}} --nproc_per_node ${{SLOTS}} --node_rank ${{RANK}} "
        f"--master_addr ${{MASTER_ADDR}} --master_port ${{MASTER_PORT}} {DDP}",
    )
    for job in (wrapped, explicit):
        results = ranks(pool, job)
        assert len({r["digest"] for r in results}) == 1  # every rank: identical weights
        losses = results[0]["losses"]
        assert isinstance(losses, list) and losses[-1] < losses[0] / 100  # the loss fell
        assert {w["node"] for w in job["workers"]} == {"node0", "node1"}  # type: ignore[union-attr]
    # Same seeds, same data: both launch forms train the same model.
    assert ranks(pool, wrapped)[0]["digest"] == ranks(pool, explicit)[0]["digest"]
    log = pool.cli("logs", str(wrapped["id"])).stdout
    assert "4 ranks on 2 nodes: weights identical" in log


MODERN = """
import argparse, os
import torch.distributed as dist
parser = argparse.ArgumentParser()  # strict: an unexpected --local-rank is an error
parser.add_argument("--steps", type=int, default=1)
args = parser.parse_args()
dist.init_process_group("gloo")
local = int(os.environ["LOCAL_RANK"])
t = __import__("torch").tensor([float(dist.get_rank())])
dist.all_reduce(t)
line = f"modern rank {dist.get_rank()} local {local} sum {t.item():g}\\n"
os.write(1, line.encode())  # one write: the ranks share one log
dist.destroy_process_group()
"""

LEGACY = """
import argparse, warnings
warnings.simplefilter("ignore")
import torch.distributed as dist
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, required=True)
args = parser.parse_args()
dist.init_process_group("gloo")
line = f"legacy rank {dist.get_rank()} local {args.local_rank}\\n"
__import__("os").write(1, line.encode())  # one write
dist.barrier()  # no rank tears its connections down while another still sets its own up
dist.destroy_process_group()
"""


def test_a_modern_script_runs_as_is_and_a_legacy_one_with_the_legacy_launcher(
    pool: ServerProcess, tmp_path: Path
) -> None:
    """Issue 11 point 1: the default launcher is torchrun's (LOCAL_RANK in the environment, no
    argument); reference 002's torch.distributed.launch stays as `launcher: legacy`."""
    modern, legacy = tmp_path / "modern.py", tmp_path / "legacy.py"
    modern.write_text(MODERN)
    legacy.write_text(LEGACY)
    common = ["--mode", "pytorch", "--nodes", "2", "--gpus", "2", "--"]
    job = run(pool, *common, PYTHON, str(modern), "--steps", "2")
    log = (
        pool.cli("logs", str(job["id"])).stdout
        + pool.cli("logs", str(job["id"]), "--worker", "1").stdout
    )
    assert sorted(line for line in log.splitlines() if line.startswith("modern")) == [
        f"modern rank {r} local {r % 2} sum 6" for r in range(4)
    ]
    assert "FutureWarning" not in log
    job = run(pool, "--launcher", "legacy", *common, PYTHON, str(legacy))
    log = (
        pool.cli("logs", str(job["id"])).stdout
        + pool.cli("logs", str(job["id"]), "--worker", "1").stdout
    )
    assert sorted(line for line in log.splitlines() if line.startswith("legacy")) == [
        f"legacy rank {r} local {r % 2}" for r in range(4)
    ]
    # The legacy script under the default launcher gets no --local-rank, and says so (one
    # process is enough to see it: each rank is a torch import of seconds on this machine).
    one = ["--mode", "pytorch", "--nodes", "1", "--gpus", "1", "--"]
    failed = pool.cli_json("submit", *one, PYTHON, str(legacy))
    done = pool.wait_status(failed["id"], {"succeeded", "failed"}, 120)
    assert done["status"] == "failed"
    assert "--local_rank" in pool.cli("logs", str(failed["id"])).stdout


def test_lightning_slurm_detection_agrees_with_the_allocation(
    pool: ServerProcess, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent("""
        import json, os
        from lightning_fabric.plugins.environments import SLURMEnvironment
        env = SLURMEnvironment()
        print(json.dumps({
            "detected": SLURMEnvironment.detect(),
            "world_size": env.world_size(),
            "global_rank": env.global_rank(),
            "node_rank": env.node_rank(),
            "local_rank": env.local_rank(),
            "main_address": env.main_address,
            "main_port": env.main_port,
            "gpuyard": [os.environ["GPUYARD_NODE_RANK"], os.environ["GPUYARD_NUM_NODES"]],
        }))
    """)
    )
    job = run(pool, "--nodes", "2", "--name", "lightning", "--", PYTHON, str(probe))
    for worker in (0, 1):
        seen = json.loads(pool.cli("logs", str(job["id"]), "--worker", str(worker)).stdout)
        assert seen["detected"] is True
        assert (seen["world_size"], seen["global_rank"], seen["node_rank"]) == (2, worker, worker)
        assert seen["local_rank"] == 0
        assert seen["gpuyard"] == [str(worker), "2"]
        assert seen["main_address"] == "127.0.0.2"  # worker 0's node


def test_a_batch_job_writes_each_sub_task_to_its_own_directory(
    pool: ServerProcess, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    tasks = "\n".join(
        f"  - command: sh -c 'echo task {i} on $GPUYARD_NODE_NAME > $GPUYARD_WORKSPACE/outputs/"
        f"result.txt'"
        for i in range(3)
    )
    job_file = tmp_path / "sweep.yaml"
    job_file.write_text(
        f"name: sweep\ntype: batch\nmounts: {{outputs: {results}}}\ntasks:\n{tasks}\n"
    )
    job = run(pool, "-f", str(job_file))
    assert len(job["workers"]) == 3  # type: ignore[arg-type]
    for i in range(3):
        text = (results / f"sweep-{i}" / "result.txt").read_text()
        assert text.startswith(f"task {i} on node")
