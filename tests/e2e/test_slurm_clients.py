"""Real Slurm clients, unchanged, against gpuyard's Slurm-compatible commands (docs/slurm.md):
submitit's SlurmExecutor (a map_array of 20 tasks, checkpoint and requeue on preemption
included), PyTorch Lightning's SLURMEnvironment under srun, and a lab's sbatch script that
starts torchrun on every node with srun and scontrol show hostnames (and sacct's step rows
for it)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

CLIENTS = Path(__file__).resolve().parents[1] / "data" / "slurm" / "clients"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("slurm") / "home"
    pool = ServerProcess(
        home, "--virtual-nodes", "2", "--gpus-per-node", "2", "--cpus-per-node", "8"
    ).start()
    # Preemption by a higher QOS (tier), with a notice long enough that only a job that
    # ignores its signal would be killed (docs/preemption.md).
    pool.cli("pools", "add", "default", "--preemption", "suspend", "--notice", "60s")
    yield pool
    pool.stop()


@pytest.fixture(scope="module")
def env(pool: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return pool.slurm_env(tmp_path_factory.mktemp("shims"))


def sbatch_and_wait(
    env: dict[str, str], cwd: Path, script: str, timeout: float = 240
) -> tuple[str, str]:
    """Submit ``script``, wait until it ends COMPLETED: (job id, its output)."""
    (cwd / "job.sh").write_text(script)
    submitted = subprocess.run(
        ["sbatch", "job.sh"], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    assert submitted.stdout.startswith("Submitted batch job "), submitted
    job_id = submitted.stdout.split()[-1]
    deadline = time.monotonic() + timeout
    while True:
        state = subprocess.run(
            ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.5)
    output = (cwd / f"slurm-{job_id}.out").read_text()
    assert state == "COMPLETED", output
    return job_id, output


def _client(script: str, folder: Path, env: dict[str, str]) -> str:
    """Run the client ``script`` on ``folder`` (from its parent); what it printed."""
    done = subprocess.run(
        [sys.executable, str(CLIENTS / script), str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=folder.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_submitit_submit_array_failure_and_cancel(env: dict[str, str], tmp_path: Path) -> None:
    printed = _client("submitit_client.py", tmp_path / "submitit", env)
    for step in ("submit ok", "array ok", "failure ok", "cancel ok"):
        assert step in printed, printed


def test_submitit_map_array_with_a_folder_per_task(env: dict[str, str], tmp_path: Path) -> None:
    # The batch step creates the task's log folder if submitit has not yet (docs/slurm.md).
    printed = _client("submitit_array.py", tmp_path / "logs", env)
    assert "map_array ok" in printed, printed


def test_submitit_checkpoints_and_requeues_when_preempted(
    env: dict[str, str], tmp_path: Path
) -> None:
    printed = _client("submitit_preempt.py", tmp_path / "submitit", env)
    assert "requeue ok" in printed, printed
    logs = "".join(p.read_text() for p in (tmp_path / "submitit").glob("*_log.err"))
    assert "Caught signal SIGUSR2" in logs and "this job is preempted" in logs, logs


def test_lightning_finds_slurm_in_two_nodes_by_two_tasks(
    env: dict[str, str], tmp_path: Path
) -> None:
    _, output = sbatch_and_wait(
        env,
        tmp_path,
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=2 --gpus-per-node=2\n"
        "#SBATCH --job-name=lightning -t 10\n"
        f"srun {sys.executable} {CLIENTS / 'lightning_train.py'}\n",
    )
    lines = sorted(line for line in output.splitlines() if line.startswith("rank="))
    assert len(lines) == 4, output
    for rank, line in enumerate(lines):
        assert line.startswith(f"rank={rank} world=4 node={rank // 2} env=SLURMEnvironment"), line
        assert "steps=3" in line, line


def test_lightning_requeues_itself_on_its_signal_and_resumes(
    env: dict[str, str], tmp_path: Path
) -> None:
    # --signal 90 s before a 2-minute limit: 30 s into each attempt Lightning saves an hpc
    # checkpoint and runs scontrol requeue; the next attempt restores it and goes on.
    _, output = sbatch_and_wait(
        env,
        tmp_path,
        "#!/bin/bash\n#SBATCH -J requeue -t 2 --signal=SIGUSR1@90 --open-mode=append\n"
        f"STEPS=800 srun {sys.executable} {CLIENTS / 'lightning_requeue.py'}\n",
        timeout=400,
    )
    assert "attempt restart=0" in output and "attempt restart=1" in output, output
    assert "Requeued SLURM job" in output, output
    assert "Restored all states from the checkpoint" in output, output
    assert "finished step=800" in output, output
    # once per attempt: a job that requeues itself is not signalled again
    assert output.count("Handling auto-requeue signal") == output.count("Requeued SLURM job")


def test_lab_script_torchrun_on_every_node(env: dict[str, str], tmp_path: Path) -> None:
    train = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"
    job_id, output = sbatch_and_wait(
        env,
        tmp_path,
        "#!/bin/bash\n"
        "#SBATCH -J lab -N 2\n#SBATCH --ntasks-per-node=1 --gpus-per-node=2 --time=0:10:00\n"
        'nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )\n'
        "head=${nodes[0]}\n"
        'head_ip=$(srun --nodes=1 --ntasks=1 -w "$head" hostname --ip-address | head -n1)\n'
        'echo "head $head at $head_ip"\n'
        f"srun {sys.executable} -m torch.distributed.run --nnodes=$SLURM_NNODES "
        "--nproc_per_node=2 --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d "
        f"--rdzv_endpoint=$head_ip:29517 {train} --steps 2\n",
    )
    assert "head node0 at " in output, output
    assert "4 ranks on 2 nodes: weights identical" in output, output
    steps = subprocess.run(
        ["sacct", "-j", job_id, "-P", "-n", "-o", "JobID,JobName,State,NodeList,NTasks"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert steps.splitlines() == [
        f"{job_id}|lab|COMPLETED|node[0-1]|",
        f"{job_id}.batch|batch|COMPLETED|node0|1",
        f"{job_id}.extern|extern|COMPLETED|node[0-1]|2",
        f"{job_id}.0|hostname|COMPLETED|node0|1",
        f"{job_id}.1|python|COMPLETED|node[0-1]|2",
    ], steps


RECORDED_ENV = CLIENTS.parent / "cases" / "env_2x2.json"
# Values that depend on the host, the ids, the user or the cluster's config: compared as shapes.
_ANY = {
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_TASK_PID", "SLURM_SRUN_COMM_PORT",
    "SLURM_STEP_LAUNCHER_PORT", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_CLUSTER_NAME",
    "SLURM_WORKING_CLUSTER", "SLURM_JOB_USER", "SLURM_JOB_UID", "SLURM_JOB_GID",
    "SLURM_JOB_ACCOUNT", "SLURM_JOB_PARTITION", "SLURM_SRUN_COMM_HOST",
    "SLURM_LAUNCH_NODE_IPADDR", "SLURM_CONF", "SLURM_UMASK",
}  # fmt: skip


# What gpuyard leaves unset on purpose (docs/slurm.md): they point a real Slurm tool at a
# slurmctld or an srun listener that does not exist here.
_NOT_SET = {
    "SLURM_CONF": "there is no slurm.conf",
    "SLURM_WORKING_CLUSTER": "names slurmctld's host and port",
    "SLURM_SRUN_COMM_PORT": "srun's own listener",
    "SLURM_STEP_LAUNCHER_PORT": "srun's own listener",
}


def _normalised(env: dict[str, str]) -> dict[str, str]:
    """Node names as gpuyard's virtual nodes are called, host- and id-bound values as '*'."""
    import re

    out = {}
    for key, raw in env.items():
        value = "*" if key in _ANY else re.sub(r"n\[0001-0002\]", "node[0-1]", raw)
        out[key] = re.sub(r"\bn000(\d)\b", lambda m: f"node{int(m.group(1)) - 1}", value)
    return out


def _env_lines(text: str) -> dict[str, str]:
    """The recorded script's ``env | grep -E '^(SLURM|SRUN|CUDA|GPU)'``, less gpuyard's own."""
    lines = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {k: v for k, v in lines if not k.startswith("GPUYARD_")}


def test_the_slurm_environment_is_slurms_variable_by_variable(
    env: dict[str, str], tmp_path: Path
) -> None:
    import json

    recorded = json.loads(RECORDED_ENV.read_text())
    script = recorded["script"].replace("#SBATCH --nodes=2", "#SBATCH --nodes=2 -J envtest")
    job_id, output = sbatch_and_wait(env, tmp_path, script.replace("%j.out", "slurm-%j.out"))
    batch = _normalised(_env_lines(output))
    tasks = [
        _normalised(_env_lines((tmp_path / f"{job_id}_{rank}.out").read_text()))
        for rank in range(4)
    ]
    want_batch = _normalised({k: v for k, v in recorded["batch"].items() if k not in _NOT_SET})
    want_tasks = [
        _normalised({k: v for k, v in t.items() if k not in _NOT_SET}) for t in recorded["tasks"]
    ]
    problems = []
    for where, got, want in [("batch", batch, want_batch)] + [
        (f"task {i}", tasks[i], want_tasks[i]) for i in range(4)
    ]:
        for key in sorted(set(got) | set(want)):
            if got.get(key) != want.get(key):
                problems.append(
                    f"{where}: {key}: gpuyard {got.get(key)!r}, Slurm {want.get(key)!r}"
                )
    assert not problems, "\n".join(problems)
