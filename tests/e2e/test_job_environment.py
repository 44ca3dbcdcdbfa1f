"""The job's environment is the submitting shell's (Slurm's --export), on a real pool.

``gpuyard submit`` runs as a user would: a process with a variable of its own in its
environment; the job prints its environment and the test reads the job's log.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("env-pool") / "home"
    # make run's pool: two virtual nodes of two GPUs (the README's DDP example fits it).
    args = ("--virtual-nodes", "2", "--gpus-per-node", "2", "--cpus-per-node", "8")
    started = ServerProcess(home, *args).start()
    yield started
    started.stop()


def _submit(
    pool: ServerProcess, *args: str, exported: dict[str, str], cwd: Path | None = None
) -> str:
    """``gpuyard submit ARGS`` from a shell with ``exported`` exported; the job's id."""
    submitted = subprocess.run(
        [sys.executable, "-m", "gpuyard", "submit", "--json", *args],
        env={**pool.env, **exported},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return str(json.loads(submitted.stdout)["id"])


def _env_of_job(pool: ServerProcess, *args: str, exported: dict[str, str]) -> dict[str, str]:
    """Submit ``env`` with ``args`` from a shell with ``exported`` exported; the job's env."""
    job_id = _submit(pool, *args, exported=exported)
    assert pool.cli("wait", job_id).returncode == 0
    lines = pool.cli("logs", job_id).stdout.splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_the_job_sees_what_the_submitting_shell_exported(pool: ServerProcess) -> None:
    exported = {
        "MY_SHELL_VAR": "from-the-shell",
        "PATH": f"/opt/mine/bin:{pool.env['PATH']}",
        "GPUYARD_SUBMITTERS_TOKEN": "secret",
    }
    env = _env_of_job(pool, "--", "env", exported=exported)
    assert env["MY_SHELL_VAR"] == "from-the-shell"
    assert env["PATH"].startswith("/opt/mine/bin:")  # the submitter's, not the pool's
    assert "GPUYARD_SUBMITTERS_TOKEN" not in env  # GPUYARD_* (tokens among them) never goes
    assert env["GPUYARD_JOB_ID"]  # the pool's contract is there, and the pool's own


def test_export_none_gives_only_what_the_pool_sets(pool: ServerProcess) -> None:
    env = _env_of_job(pool, "--export=NONE", "--", "env", exported={"MY_SHELL_VAR": "x"})
    assert "MY_SHELL_VAR" not in env
    assert env["GPUYARD_JOB_ID"]


def test_export_sets_and_names_variables(pool: ServerProcess) -> None:
    env = _env_of_job(
        pool, "--export=A=1,MY_SHELL_VAR", "--", "env", exported={"MY_SHELL_VAR": "x", "B": "2"}
    )
    assert (env["A"], env["MY_SHELL_VAR"]) == ("1", "x")
    assert "B" not in env


def test_a_job_files_export(pool: ServerProcess, tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("command: env\nexport: NONE,FROM_FILE=yes\n")
    env = _env_of_job(pool, "-f", str(job_file), exported={"MY_SHELL_VAR": "x"})
    assert env["FROM_FILE"] == "yes"
    assert "MY_SHELL_VAR" not in env


def test_the_readmes_ddp_command_runs_from_an_activated_venv(pool: ServerProcess) -> None:
    # README.md, "A short tour", word for word, from the repository's root with the venv
    # activated: `python` is the venv's because the job's PATH is the submitter's.
    venv = Path(sys.executable).parent
    activated = {"PATH": f"{venv}:{pool.env['PATH']}", "VIRTUAL_ENV": str(venv.parent)}
    command = shlex.split("--mode pytorch --nodes 2 --gpus 2 -- python examples/ddp_train.py")
    job_id = _submit(pool, *command, exported=activated, cwd=ROOT)
    waited = pool.cli("wait", job_id, check=False, timeout=240)
    assert waited.returncode == 0, pool.cli("logs", job_id).stdout[-3000:]
    assert "4 ranks on 2 nodes: weights identical" in pool.cli("logs", job_id).stdout
