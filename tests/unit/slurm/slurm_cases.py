"""The recorded Slurm 22.05 cases (tests/data/slurm/cases) as the records gpuyard renders."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from gpuyard.slurm.records import JobRecord, StepRecord

CASES = Path(__file__).resolve().parents[2] / "data" / "slurm" / "cases"

ALL_CASES: list[dict[str, Any]] = [json.loads(p.read_text()) for p in sorted(CASES.glob("*.json"))]

NODE_MEMORY_MB = 1_000_000
"""The recipe's RealMemory: what sacct's ReqMem shows for a job that asked for no memory."""


def _megabytes(text: str) -> int:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else 0


def build(cls: type[Any], data: dict[str, Any]) -> Any:
    """A record from a case's facts. Two facts the recorder keeps only in the raw fields are
    read from them: ``--gpus-per-task`` (scontrol's TresPerTask) and an explicit ``--mem``
    (sacct's ReqMem, when it is not the whole node a job without --mem gets)."""
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key == "steps":
            kwargs[key] = tuple(build(StepRecord, s) for s in value)
        elif key in names:
            kwargs[key] = tuple(value) if isinstance(value, list) else value
    if cls is JobRecord:
        per_task = (data.get("scontrol") or {}).get("TresPerTask", "")
        if per_task.startswith("gres:gpu:"):
            kwargs["gpus_per_task"] = int(per_task.rsplit(":", 1)[1])
        asked = _megabytes((data.get("sacct") or {}).get("ReqMem", ""))
        nodes = max(1, int(data.get("num_nodes") or 1))
        if asked and not data.get("memory_mb") and asked != NODE_MEMORY_MB * nodes:
            kwargs["memory_mb"] = asked // nodes
    return cls(**kwargs)


def jobs_of(case: dict[str, Any]) -> list[JobRecord]:
    return [build(JobRecord, j) for j in case.get("jobs", [])]
