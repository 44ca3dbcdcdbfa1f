"""A small machine split into virtual nodes (issue 29, point 4): with a core each, a stock
`#SBATCH --ntasks-per-node=2` script is refused at `sbatch` with the `gpuyard up` flag that
would help; with that flag (`--cpus-per-node 2`, more than the host's share) it runs. Real
`gpuyard up` processes, the real sbatch shim."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = pytest.mark.slow

SCRIPT = (
    "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=2 -t 5\n"
    "srun bash -c 'echo \"task=$SLURM_PROCID node=$SLURM_NODEID\"'\n"
)


def sbatch(pool: ServerProcess, cwd: Path) -> subprocess.CompletedProcess[str]:
    (cwd / "job.sh").write_text(SCRIPT)
    env = pool.slurm_env(cwd / "shims")
    return subprocess.run(
        ["sbatch", "job.sh"], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def test_a_stock_two_tasks_per_node_script_on_two_small_virtual_nodes(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    # One CPU a node, as --virtual-nodes 2 gives on a 2-core machine (set, so that a larger
    # machine shows the same).
    small = pool_factory(tmp_path / "small", "--virtual-nodes", "2", "--cpus-per-node", "1")
    small.start()
    (tmp_path / "a").mkdir()
    refused = sbatch(small, tmp_path / "a")
    assert refused.returncode != 0, refused
    assert "no node has 2 CPUs (largest:" in refused.stderr, refused.stderr
    assert "`gpuyard up --cpus-per-node 2`" in refused.stderr, refused.stderr
    small.stop()

    roomy = pool_factory(tmp_path / "roomy", "--virtual-nodes", "2", "--cpus-per-node", "2")
    roomy.start()
    (tmp_path / "b").mkdir()
    submitted = sbatch(roomy, tmp_path / "b")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[-1]
    job = roomy.wait_status(int(job_id), {"succeeded", "failed", "stopped"}, timeout=120)
    output = (tmp_path / "b" / f"slurm-{job_id}.out").read_text()
    assert job["status"] == "succeeded", output
    lines = sorted(line for line in output.splitlines() if line.startswith("task="))
    assert lines == [f"task={t} node={t // 2}" for t in range(4)], output
