"""torchx, unchanged, against gpuyard's Slurm-compatible commands: its ``slurm`` scheduler
submits every app as a heterogeneous job (docs/slurm.md), one component per replica, with
different resources per role, and reads the states back with ``sacct --parsable2``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm-torchx")]

CLIENTS = Path(__file__).resolve().parents[1] / "data" / "slurm" / "clients"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("torchx") / "home"
    pool = ServerProcess(
        home, "--virtual-nodes", "3", "--gpus-per-node", "2", "--cpus-per-node", "4"
    ).start()
    yield pool.slurm_env(tmp_path_factory.mktemp("shims"))
    pool.stop()


def test_torchx_runs_fails_and_cancels_heterogeneous_apps(
    env: dict[str, str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, str(CLIENTS / "torchx_client.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("het ok", "failure ok", "cancel ok"):
        assert step in done.stdout, done.stdout + done.stderr


RECORDED_HET_ENV = CLIENTS.parent / "cases" / "het_env_sizes.json"
# Bound to the host, the ids, the user or the cluster's config: compared as shapes.
_ANY = re.compile(
    r"^SLURM_(JOB_ID|JOBID|TASK_PID|SRUN_COMM_HOST|LAUNCH_NODE_IPADDR|SUBMIT_DIR|SUBMIT_HOST|"
    r"CLUSTER_NAME|JOB_USER|JOB_UID|JOB_GID|JOB_ACCOUNT|JOB_PARTITION|UMASK)"
    r"(_(HET|PACK)_GROUP_\d+)?$"
)
# Unset on purpose (docs/slurm.md): they point real Slurm tools at daemons that are not here.
_NOT_SET = {
    "SLURM_CONF",
    "SLURM_WORKING_CLUSTER",
    "SLURM_SRUN_COMM_PORT",
    "SLURM_STEP_LAUNCHER_PORT",
}
# Which GPUs of a node a job gets is the node's business: GPU lists are compared by length.
_GPU_LISTS = {"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"}
# On purpose, on a node of a component without GPUs (docs/slurm.md): gpuyard hides every GPU
# (an empty CUDA_VISIBLE_DEVICES, SLURM_GPUS_ON_NODE=0) where Slurm leaves them unset, which
# would show a process all of the node's GPUs; and it does not hand on another node's GPU list.
_GPULESS = {
    "CUDA_VISIBLE_DEVICES": ("", None),
    "SLURM_GPUS_ON_NODE": ("0", None),
    "SLURM_JOB_GPUS": (None, "#2"),
}


def _shape(env: dict[str, str]) -> dict[str, str]:
    """Recorded node names n0001.. as gpuyard's node0..; host-bound values as '*'."""

    def node(match: re.Match[str]) -> str:
        return f"node{int(match.group(1)) - 1}"

    def nodes(match: re.Match[str]) -> str:
        return f"node[{int(match.group(1)) - 1}-{int(match.group(2)) - 1}]"

    out = {}
    for key, raw in env.items():
        if key in _NOT_SET or key.startswith("GPUYARD_"):
            continue
        value = re.sub(r"n\[(\d{4})-(\d{4})\]", nodes, raw)
        if key in _GPU_LISTS and value:
            value = f"#{len(value.split(','))}"
        out[key] = "*" if _ANY.match(key) else re.sub(r"\bn(\d{4})\b", node, value)
    return out


def _env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


def test_a_heterogeneous_jobs_environment_is_slurms_variable_by_variable(
    env: dict[str, str], tmp_path: Path
) -> None:
    recorded = json.loads(RECORDED_HET_ENV.read_text())
    script = recorded["script"].split("for i in")[0]  # without the wait for a release file
    (tmp_path / "sizes.sh").write_text(script)
    job = subprocess.run(
        ["sbatch", "--parsable", "sizes.sh"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deadline = time.monotonic() + 120
    while "plain step" not in _read(tmp_path / f"slurm-{job}.out"):
        assert time.monotonic() < deadline, _read(tmp_path / f"slurm-{job}.out")
        time.sleep(0.3)
    output = _read(tmp_path / f"slurm-{job}.out")
    # the het step, --het-group=1 (two nodes) and a plain srun (component 0: two tasks)
    assert output.splitlines()[0] == "het step: 0", output
    assert output.count("step: 0") == 3 and len(output.splitlines()) == 7, output
    got = [("batch", _shape(_env_file(tmp_path / f"batch-{job}.env")))]
    for rank, component in enumerate(recorded["task_component"]):
        path = tmp_path / f"task-{job}-{component}-{rank}.env"
        got.append((f"task {rank}", _shape(_env_file(path))))
    want = [_shape(recorded["batch"])] + [_shape(t) for t in recorded["tasks"]]
    problems = []
    for (where, mine), theirs in zip(got, want, strict=True):
        gpuless = where != "batch" and theirs.get("SLURM_GPUS_ON_NODE") is None
        for key in sorted(set(mine) | set(theirs)):
            if gpuless and _GPULESS.get(key) == (mine.get(key), theirs.get(key)):
                continue
            if mine.get(key) != theirs.get(key):
                problems.append(
                    f"{where}: {key}: gpuyard {mine.get(key)!r}, Slurm {theirs.get(key)!r}"
                )
    assert not problems, "\n".join(problems)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
