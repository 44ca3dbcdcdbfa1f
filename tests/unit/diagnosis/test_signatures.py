"""Every signature against real log lines: lines copied from public issue threads (the source
of each is in tests/data/fault_logs.json) that must be recognised, and real near-misses from
the same threads that must not be (advice, INFO lines, warnings, retries, banners)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuyard.diagnosis.signatures import Cause, observe, scan

DATA = Path(__file__).resolve().parents[2] / "data" / "fault_logs.json"
ENTRIES: list[dict[str, Any]] = json.loads(DATA.read_text())

ALLOWED = {
    "nccl_timeout": {Cause.NCCL_TIMEOUT},
    "nccl_watchdog_stuck": {Cause.NCCL_WATCHDOG},
    "nccl_other": {Cause.COLLECTIVE, Cause.PEER_GONE},
    "gloo_timeout": {Cause.GLOO_TIMEOUT, Cause.PEER_GONE},  # gloo's own reads of a dead peer
    "cuda_fatal": {Cause.CUDA_FATAL, Cause.APPLICATION},  # a device-side assert is the job's
    "gpu_oom": {Cause.GPU_OOM},
    "host_oom": {Cause.HOST_OOM, Cause.KILLED},  # a bare SIGKILL is OOM-suspect, not proof
    "xid": {Cause.XID},
    "data_io": {Cause.DATA_IO},
    "nan": {Cause.NAN},
    "segfault": {Cause.CRASH},
    "peer_gone": {Cause.PEER_GONE, Cause.WORKER_FAILED},
    "python_exception": {Cause.APPLICATION},
}


def test_the_data_covers_every_category_with_sources() -> None:
    assert {e["category"] for e in ENTRIES} == set(ALLOWED)
    for category in ALLOWED:
        matches = [e for e in ENTRIES if e["category"] == category and e["match"]]
        assert len(matches) >= 2, category
    assert all(e["source"].startswith("https://") for e in ENTRIES)
    assert sum(not e["match"] for e in ENTRIES) >= 15


def _cause(entry: dict[str, Any]) -> Cause | None:
    if entry["category"] == "python_exception":
        # An exception line means something only as the end of a traceback.
        found = scan(
            ["Traceback (most recent call last):", '  File "train.py", line 1', entry["line"]]
        )
        return found[0].cause if found else None
    signature = observe(entry["line"])
    return signature.cause if signature else None


@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if e["match"]],
    ids=lambda e: f"{e['category']}:{e['line'][:40]}",
)
def test_real_fault_lines_are_recognised(entry: dict[str, Any]) -> None:
    assert _cause(entry) in ALLOWED[entry["category"]], (entry["line"], entry["source"])


@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if not e["match"]],
    ids=lambda e: f"{e['category']}:{e['line'][:40]}",
)
def test_real_near_misses_are_not(entry: dict[str, Any]) -> None:
    assert _cause(entry) is None, (entry["line"], entry["source"])
