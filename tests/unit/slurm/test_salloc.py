"""salloc's stderr lines and its command line, against a real Slurm 22.05.8's (recorded in
tests/data/slurm/cases/salloc_*.json); the allocation itself is tested against a real pool in
tests/e2e/test_slurm_salloc.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuyard.slurm.commands import salloc
from gpuyard.slurm.options import OptionError

CASES = Path(__file__).resolve().parents[2] / "data" / "slurm" / "cases"
SALLOC_CASES = [json.loads(p.read_text()) for p in sorted(CASES.glob("salloc_*.json"))]


def _nodes(stderr: str) -> list[str]:
    from gpuyard.hostlist import expand_hostlist

    for line in stderr.splitlines():
        if line.startswith("salloc: Nodes "):
            return expand_hostlist(line.split()[2])
    return []


@pytest.mark.parametrize("case", SALLOC_CASES, ids=[c["name"] for c in SALLOC_CASES])
def test_recorded_stderr(case: dict[str, Any]) -> None:
    job_id = case["job_id"]
    pending = f"salloc: Pending job allocation {job_id}" in case["stderr"]
    lines = salloc.pending_lines(job_id) if pending else []
    lines += salloc.granted_lines(job_id, _nodes(case["stderr"]), pending=pending)
    lines.append(salloc.relinquish_line(job_id))
    # Slurm sometimes adds "Job allocation N has been revoked." when slurmctld's notice of the
    # end races the exit; gpuyard's allocation ends after the command, so it never does.
    real = [line for line in case["stderr"].splitlines() if not line.endswith("has been revoked.")]
    assert [f"salloc: {line}" for line in lines] == real


def test_revoked_wording() -> None:
    (case,) = [c for c in SALLOC_CASES if c["name"] == "salloc_env"]
    job_id = case["job_id"]
    assert f"salloc: {salloc.revoked_line(job_id)}" in case["stderr"].splitlines()


def test_cases_recorded() -> None:
    assert {c["name"] for c in SALLOC_CASES} >= {"salloc_env", "salloc_srun_exit", "salloc_true"}
    assert any("Pending job allocation" in c["stderr"] for c in SALLOC_CASES)
    assert {c["exit_code"] for c in SALLOC_CASES} == {0, 3}


def test_command_line() -> None:
    options, command = salloc._options(["-N2", "--ntasks-per-node=2", "bash", "-c", "srun x"])
    assert command == ["bash", "-c", "srun x"]
    assert options == ["-N2", "--ntasks-per-node=2", "--job-name=interactive"]
    options, _ = salloc._options(["-J", "mine", "python", "-V"])
    assert options == ["-J", "mine"]
    with pytest.raises(OptionError, match="salloc needs a command"):
        salloc._options(["-N2"])
    with pytest.raises(OptionError, match="--array"):
        salloc._options(["--array=0-3", "true"])
