"""examples/preemptible_train.py without the server: torchrun, 2 ranks, suspended and resumed.

The same training run twice, in fresh directories: once straight through, once under
``python -m gpuyard.runtime simulate`` so that it is preempted mid-run, saves, suspends (torchrun
reports the ranks' 75 as its own 1), and resumes as attempt 1 from the checkpoint. The final
weights must be bit-identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "preemptible_train.py"
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
STEPS = 60


def torchrun(*args: str) -> list[str]:
    return [TORCHRUN, "--standalone", "--nproc-per-node", "2", str(EXAMPLE), *args]


def run(command: list[str], workdir: Path) -> subprocess.CompletedProcess[str]:
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    env["GPUYARD_OUTPUT_DIR"] = str(workdir / "out")
    return subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=240, check=False
    )


def digests(workdir: Path) -> list[str]:
    ranks = [json.loads((workdir / "out" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    return [rank["digest"] for rank in ranks]


def test_suspended_and_resumed_run_ends_with_the_same_weights(tmp_path: Path) -> None:
    straight = run(torchrun("--steps", str(STEPS)), tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    reference = digests(tmp_path / "straight")
    assert reference[0] == reference[1]
    assert not (tmp_path / "straight" / "checkpoints").exists()  # never preempted

    simulate = [sys.executable, "-m", "gpuyard.runtime", "simulate", "--after", "1.5"]
    simulate += ["--control-dir", str(tmp_path), "--"]
    resumed = run(
        [*simulate, *torchrun("--steps", str(STEPS), "--step-time", "0.05")], tmp_path / "resumed"
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = [line for line in resumed.stderr.splitlines() if line.startswith("gpuyard simulate:")]
    assert "attempt 0: suspended after" in lines[2], lines
    assert "attempt 1: succeeded after" in lines[4], lines

    control = next(tmp_path.glob("gpuyard-simulate-*"))
    saved = json.loads((control / "attempt-0" / "checkpoint.json").read_text())
    assert 0 < saved["step"] < STEPS  # preempted mid-run, not before or after
    assert saved["path"] == str(control / "checkpoints" / "checkpoint.pt")  # not in the cwd
    assert (control / "attempt-0" / "suspended.json").is_file()
    assert json.loads((control / "attempt-0" / "ack.json").read_text())["rank"] in (0, 1)
    assert not (control / "attempt-1" / "suspended.json").exists()
    assert f"attempt 1: resuming at step {saved['step']}" in resumed.stdout
    assert json.loads((tmp_path / "resumed" / "out" / "rank-0.json").read_text())["attempt"] == 1

    assert digests(tmp_path / "resumed") == reference


def test_a_nan_on_the_first_attempt_fails_it_and_a_resumed_attempt_ends_with_the_same_weights(
    tmp_path: Path,
) -> None:
    straight = run(torchrun("--steps", "30"), tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]

    workdir = tmp_path / "faulty"
    args = ("--steps", "30", "--checkpoint-every", "10", "--nan-at", "25")
    failed = run(torchrun(*args), workdir)
    assert failed.returncode != 0
    assert "step 25: loss is nan" in failed.stdout, failed.stdout[-3000:]
    assert not (workdir / "out" / "rank-0.json").exists()

    # The next attempt, in the same directory (its checkpoint at step 20), as gpuyard runs it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    env |= {"GPUYARD_OUTPUT_DIR": str(workdir / "out"), "GPUYARD_ATTEMPT": "1"}
    resumed = subprocess.run(
        torchrun(*args),
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "attempt 1: resuming at step 20" in resumed.stdout
    assert "nan" not in resumed.stdout
    assert digests(workdir) == digests(tmp_path / "straight")
