"""Issue 26 point 5, end to end: the launch modes inside an image (docs/images.md, "Launch
modes in an image"). One real `gpuyard up` of two virtual nodes whose registry holds
``alice/pytorch:1`` (Debian's Python, torch, mpi4py and Open MPI, :mod:`gpuyard.testing.pyimage`);
the examples' scripts reach the job as its code directory (``--algorithm``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gpuyard
from gpuyard.testing.process import ServerProcess
from gpuyard.testing.registry import PushedImage, TestRegistry

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("images_modes"),
    pytest.mark.skipif(os.geteuid() != 0, reason="workers in an image need a pool run by root"),
]

ENDED = {"succeeded", "failed", "stopped", "expired"}
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
    pool.cli("pools", "add", "default", "--preemption", "suspend", "--notice", "60s")
    yield pool
    pool.stop()


def submit(pool: ServerProcess, *args: str) -> int:
    image = ("--image", "alice/pytorch:1", "--algorithm", str(EXAMPLES))
    return int(pool.cli_json("submit", *image, *args)["id"])


def run(pool: ServerProcess, *args: str, timeout: float = 240) -> dict[str, Any]:
    job_id = submit(pool, *args)
    done: dict[str, Any] = pool.wait_status(job_id, ENDED, timeout)
    assert done["status"] == "succeeded", (done, pool.cli("logs", str(job_id)).stdout[-3000:])
    return done


def _ranks(pool: ServerProcess, job: dict[str, Any]) -> list[dict[str, Any]]:
    outputs = pool.home / "jobs" / str(job["id"]) / "outputs"
    return [json.loads((outputs / f"rank-{r}.json").read_text()) for r in range(4)]


def test_ddp_two_nodes_by_two_processes_trains_in_the_image(pool: ServerProcess) -> None:
    """Wrapped by the pool (``python -m torch.distributed.run``) and the user's own
    ``torchrun`` (the image's console script): the same model, identical on every rank."""
    ddp = ("--mode", "pytorch", "--nodes", "2", "--gpus", "2", "--")
    wrapped = run(pool, *ddp, "python", "algorithm/ddp_train.py")
    explicit = run(
        pool,
        *ddp,
        "torchrun --nnodes ${WORLD_SIZE} --nproc_per_node ${SLOTS} --node_rank ${RANK} "
        "--master_addr ${MASTER_ADDR} --master_port ${MASTER_PORT} algorithm/ddp_train.py",
    )
    for job in (wrapped, explicit):
        results = _ranks(pool, job)
        assert len({r["digest"] for r in results}) == 1  # every rank: identical weights
        losses = results[0]["losses"]
        assert isinstance(losses, list) and losses[-1] < losses[0] / 100
        assert {w["node"] for w in job["workers"]} == {"node0", "node1"}
    assert _ranks(pool, wrapped)[0]["digest"] == _ranks(pool, explicit)[0]["digest"]
    log = pool.cli("logs", str(wrapped["id"])).stdout
    assert "4 ranks on 2 nodes: weights identical" in log


def test_an_mpi_job_runs_across_two_nodes_in_the_image(pool: ServerProcess) -> None:
    """Open MPI's daemons start on the second node through gpuyard's rsh agent, whose server
    runs in the image with the image's Python (no ssh, no host MPI). The script is the
    image's: the ranks on the second node run in the launcher's working directory, and the
    code directory is bound in the launcher's worker only."""
    job = run(
        pool, "--mode", "mpi", "--mpi", "openmpi", "--nodes", "2", "--gpus", "2",
        "--workdir", "/opt/examples", "--max-runtime", "120s", "--graceful-shutdown", "5",
        "--", "python mpi_test.py",
    )  # fmt: skip
    launcher = pool.cli("logs", str(job["id"]), "--worker", "0").stdout
    target = pool.cli("logs", str(job["id"]), "--worker", "1").stdout
    assert "mpi_test: 4 ranks on 2 nodes (node0: 0 1; node1: 2 3), Open MPI" in launcher
    assert "mpi_test: allreduce over 4 ranks: sums [10, 30]: ok" in launcher
    assert re.search(r"rexec: 127\.0\.0\.\d+:\d+ runs: .*prted", target), target
    assert [w["node"] for w in job["workers"]] == ["node0", "node1"]


def _digest(pool: ServerProcess, job_id: int) -> str:
    outputs = pool.home / "jobs" / str(job_id) / "outputs"
    digests = {json.loads((outputs / f"rank-{r}.json").read_text())["digest"] for r in (0, 1)}
    assert len(digests) == 1  # both ranks end with the same weights
    return digests.pop()


def test_a_suspended_job_in_the_image_resumes_with_the_same_weights(pool: ServerProcess) -> None:
    """gpuyard.runtime reaches the job through the pool's package mounted in the image."""
    train = [
        "--mode", "pytorch", "--nodes", "2", "--gpus", "1", "--priority", "low", "--",
        "python", "algorithm/preemptible_train.py", "--steps", "160", "--step-time", "0.05",
    ]  # fmt: skip
    reference = run(pool, "--name", "reference", *train)["id"]
    low = submit(pool, "--name", "low", *train)
    pool.wait_for_step(low, 15)
    high = submit(
        pool, "--name", "high", "--priority", "high", "--nodes", "2", "--gpus", "2", "--",
        "python", "-c", "print('high ran')",
    )  # fmt: skip
    assert pool.wait_status(high, ENDED, 180)["status"] == "succeeded"
    done = pool.wait_status(low, ENDED, 180)
    assert done["status"] == "succeeded", pool.cli("logs", str(low)).stdout[-3000:]
    assert (done["attempt"], done["suspensions"]) == (1, 1)
    assert _digest(pool, low) == _digest(pool, reference)
    assert "attempt 1: resuming at step" in pool.cli("logs", str(low)).stdout


def test_the_pools_package_is_in_the_image_read_only(pool: ServerProcess) -> None:
    script = (
        "cat /etc/os-release; python -c 'import gpuyard.runtime, sys; print(sys.executable)'; "
        "touch /.gpuyard/lib/gpuyard/planted 2>/dev/null && echo written || echo refused"
    )
    job = run(pool, "--", f"sh -c {shlex.quote(script)}")
    out = pool.cli("logs", str(job["id"])).stdout.splitlines()
    assert out[0] == "ID=gpuyard-pytest"  # the image's, not this machine's
    assert out[2:] == ["/usr/bin/python", "refused"]
    assert not (Path(gpuyard.__file__).parent / "planted").exists()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the job's account can pass through (pytest's are root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="gpuyard-sbatch-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_sbatch_script_with_pyxis_options_runs_in_the_image(
    pool: ServerProcess, shared_dir: Path
) -> None:
    """NVIDIA clusters' Slurm users name the image with pyxis's options (docs/slurm.md,
    "Containers"): the batch script runs in the image, with the mounts and working directory
    asked for, and its output lands in the submission's directory as without an image."""
    tmp_path = shared_dir
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "x").write_text("the host's data\n")
    (data / "x").chmod(0o644)
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        "#SBATCH --container-image=alice/pytorch:1\n"
        f"#SBATCH --container-mounts={data}:/data:ro\n"
        "#SBATCH --container-workdir=/opt/examples\n"
        "grep ^ID= /etc/os-release; cat /data/x; pwd\n"
        'python3 -c "import torch; print(torch.__name__)"\n'
        "touch /data/y 2>/dev/null || echo read-only\n"
    )
    env = pool.slurm_env(tmp_path / "shims")
    sbatch = subprocess.run(
        ["sbatch", "--parsable", str(script)], env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert sbatch.returncode == 0, sbatch.stderr
    job_id = int(sbatch.stdout.strip())
    done = pool.wait_status(job_id, ENDED, 180)
    output = tmp_path / f"slurm-{job_id}.out"
    log = pool.cli("logs", str(job_id)).stdout
    assert done["status"] == "succeeded", (done, log, output.exists() and output.read_text())
    assert output.exists(), (done, log)
    assert output.read_text().splitlines() == [
        "ID=gpuyard-pytest",
        "the host's data",
        "/opt/examples",
        "torch",
        "read-only",
    ]
