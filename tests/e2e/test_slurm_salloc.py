"""``salloc`` with ``srun`` inside it, ``squeue --json`` and ``sacct --json``, against a real pool
through the shims (docs/slurm.md)."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm-salloc")]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("salloc") / "home"
    pool = ServerProcess(
        home, "--virtual-nodes", "2", "--gpus-per-node", "2", "--cpus-per-node", "8"
    ).start()
    yield pool.slurm_env(tmp_path_factory.mktemp("shims"))
    pool.stop()


def test_salloc_runs_srun_steps_in_the_allocation(env: dict[str, str], tmp_path: Path) -> None:
    command = (
        'echo "job=$SLURM_JOB_ID nodes=$SLURM_NNODES list=$SLURM_JOB_NODELIST"; '
        "srun bash -c 'echo task $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME' | sort; "
        "exit 3"
    )
    done = subprocess.run(
        ["salloc", "-N2", "--ntasks-per-node=2", "-J", "alloc", "bash", "-c", command],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done
    lines = done.stderr.splitlines()
    job_id = lines[0].split()[-1]
    assert lines[0] == f"salloc: Granted job allocation {job_id}", done.stderr
    assert lines[-1] == f"salloc: Relinquishing job allocation {job_id}", done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith(f"job={job_id} nodes=2 list="), done.stdout
    tasks = sorted(line.rsplit(" on ", 1)[0] for line in out if line.startswith("task "))
    assert tasks == [f"task {i} of 4" for i in range(4)], done.stdout
    assert len({line.rsplit(" on ", 1)[1] for line in out if line.startswith("task ")}) == 2

    # the allocation is over, and both JSON listings say how it ended
    listed = subprocess.run(
        ["sacct", "--json", "-j", job_id], env=env, capture_output=True, text=True, check=True
    )
    (job,) = [j for j in json.loads(listed.stdout)["jobs"] if str(j["job_id"]) == job_id]
    assert job["state"]["current"] == "FAILED"
    assert job["name"] == "alloc"
    assert job["exit_code"] == {"status": "FAILED", "return_code": 3}
    # torchx's list: every job since the epoch, read as job_id and state.current
    everything = subprocess.run(
        ["sacct", "--json", "-S1970-01-01-00:00:01"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    states = {
        str(j["job_id"]): j["state"]["current"] for j in json.loads(everything.stdout)["jobs"]
    }
    assert states[job_id] == "FAILED"
    queued = subprocess.run(
        ["squeue", "--json", "-j", job_id], env=env, capture_output=True, text=True, check=True
    )
    (entry,) = json.loads(queued.stdout)["jobs"]
    assert (entry["job_id"], entry["job_state"], entry["node_count"]) == (int(job_id), "FAILED", 2)


def test_salloc_without_a_command_says_why(env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(
        ["salloc", "-N1"],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "salloc needs a command" in done.stderr


def test_salloc_waits_for_resources_and_sigterm_releases(
    env: dict[str, str], tmp_path: Path
) -> None:
    holder = subprocess.Popen(
        ["salloc", "-N2", "--gpus-per-node=2", "sleep", "300"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stderr is not None
    granted = holder.stderr.readline()
    assert granted.startswith("salloc: Granted job allocation "), granted
    waiter = subprocess.Popen(
        ["salloc", "--gpus-per-node=2", "echo", "hi"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert waiter.stderr is not None
    first = waiter.stderr.readline()
    assert first.startswith("salloc: Pending job allocation "), first
    job_id = first.split()[-1]
    assert waiter.stderr.readline() == f"salloc: job {job_id} queued and waiting for resources\n"
    holder_id = granted.split()[-1]
    running = subprocess.run(
        ["squeue", "--json"], env=env, capture_output=True, text=True, check=True
    )
    states = {str(j["job_id"]): j["job_state"] for j in json.loads(running.stdout)["jobs"]}
    assert states[holder_id] == "RUNNING"
    assert states[job_id] == "PENDING"
    holder.send_signal(signal.SIGTERM)  # Ctrl-C (SIGINT) and SIGHUP take the same path
    _, holder_err = holder.communicate(timeout=60)
    assert holder.returncode == 128 + signal.SIGTERM
    assert holder_err.splitlines()[-1] == f"salloc: Relinquishing job allocation {holder_id}"
    # read to the end through the same buffered streams as readline() (communicate() with a
    # timeout reads the raw pipes and would lose what readline() buffered)
    assert waiter.stdout is not None
    err = waiter.stderr.read()
    out = waiter.stdout.read()
    waiter.wait(timeout=120)
    assert waiter.returncode == 0, err
    assert out == "hi\n"
    assert err.splitlines()[:2] == [
        f"salloc: job {job_id} has been allocated resources",
        f"salloc: Granted job allocation {job_id}",
    ]
