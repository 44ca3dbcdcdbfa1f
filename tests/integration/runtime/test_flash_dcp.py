"""The checkpoint service with torch.distributed.checkpoint's state dicts of a sharded (FSDP2)
model on 2 ranks (gloo, CPU): saved shard by shard, loaded into fresh state dicts from node
memory and from storage, training goes on bit-identical."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "fsdp_flash.py"


def run(phase: str, tmp_path: Path) -> set[tuple[str, ...]]:
    env = {
        **os.environ,
        "GPUYARD_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "GPUYARD_CHECKPOINT_MEMORY_DIR": str(tmp_path / "memory"),
        "OMP_NUM_THREADS": "1",
    }
    torchrun = Path(sys.executable).parent / "torchrun"
    done = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", str(SCRIPT), phase],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = {
        tuple(line.split()[1:]) for line in done.stdout.splitlines() if line.startswith("digest")
    }
    assert done.returncode == 0 and len(lines) == 1, done.stdout + done.stderr
    return lines


def test_a_sharded_state_resumes_from_memory_and_from_storage(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    ((reference, _),) = run("save", tmp_path)
    assert run("load", tmp_path) == {(reference, "memory", "3")}
    shutil.rmtree(tmp_path / "memory")
    (tmp_path / "memory").mkdir()
    assert run("load", tmp_path) == {(reference, "storage", "3")}
