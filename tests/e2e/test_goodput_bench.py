"""bench/goodput.py --quick end to end: a real pool, a real DDP job (gloo) hit by a NaN of its
own and by a killed rank whose node then fails its re-check, beside the same job without faults.

Speed is the bench's to print, not this test's to assert: it checks that every fault was seen
in the ft-log and recovered from, that the failing node was left for the spare, and that the
job still ended with the weights of the run without faults.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("goodput")]

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_goodput_bench_recovers_from_every_fault(tmp_path: Path) -> None:
    figures = tmp_path / "goodput.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "goodput.py"), "--quick", "--json", str(figures)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(figures.read_text())
    summary, faults = report["summary"], report["faults"]
    assert summary["same_weights"] is True
    assert summary["placements"] == ["node0, node1", "node0, node2"]  # node1 failed its check
    kinds = [f["kind"] for f in faults]
    assert kinds == ["nan", "check"]  # not "unplanned": no restart the bench did not cause
    nan, check = faults[0], faults[1]
    assert [e["kind"] for e in nan["ft_log"]] == ["failure"]
    assert nan["ft_log"][0]["suspect"] == "job"
    assert [(e["kind"], e["node"]) for e in check["ft_log"]][-1] == ("check", "node1")
    for fault in faults:
        assert all(e["outcome"].startswith("running again") for e in fault["ft_log"]), fault
        assert all(seconds >= -0.5 for seconds in fault["phases_s"].values()), fault
    assert "PROJECTION, one fault per 10 min of training" in run.stdout
