"""torchx, unchanged, against gpuyard's Slurm-compatible commands: its ``slurm`` scheduler
submits every app as a heterogeneous job (docs/slurm.md), one component per replica, with
different resources per role, and reads the states back with ``sacct --parsable2``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.slurm.shims import write_shims
from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm-torchx")]

CLIENTS = Path(__file__).resolve().parents[1] / "data" / "slurm" / "clients"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("torchx") / "home"
    pool = ServerProcess(
        home, "--virtual-nodes", "3", "--gpus-per-node", "2", "--cpus-per-node", "4"
    ).start()
    shims = tmp_path_factory.mktemp("shims")
    write_shims(shims)
    venv_bin = str(Path(sys.executable).parent)
    yield {**pool.env, "PATH": f"{shims}:{venv_bin}:{os.environ.get('PATH', '')}"}
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
