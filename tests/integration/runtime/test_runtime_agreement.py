"""`gpuyard.runtime.torch.preemption_agreed` in a real 2-process torch.distributed (gloo) group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

# Each rank has its own control dir, as two workers do. Round 1: no notice anywhere. Then rank 1
# (only) gets the flag file, and waits past the file check interval; rank 0 waits for it in the
# collective. Round 2: both must answer True, rank 0 having learnt it from its peer.
WORKER = """
import json, os, sys, time
import torch.distributed as dist
import gpuyard.runtime as gr
from gpuyard.runtime.control import write_json

rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
rounds = [gr.torch.preemption_agreed()]
local_before = gr.preemption_requested()
if rank == 1:
    write_json(gr.control_dir, "preempt.json", {"requested_at": 1.0, "deadline": 99.0,
               "reason": "test", "by": "test"})
    time.sleep(0.6)
rounds.append(gr.torch.preemption_agreed())
notice = gr.preemption_notice()
print(json.dumps({"rank": rank, "rounds": rounds, "local_before": local_before,
                  "source": notice and notice.source, "deadline": gr.preemption_deadline()}))
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)
"""


def test_both_ranks_agree_when_only_one_has_the_notice(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(WORKER))
    store = tmp_path / "store"
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    procs = []
    for rank in (0, 1):
        control = tmp_path / f"control-{rank}"
        env = {**base, "GPUYARD_CONTROL_DIR": str(control), "OMP_NUM_THREADS": "1"}
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(rank), str(store)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = {}
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        line = json.loads(out.strip().splitlines()[-1])
        results[line["rank"]] = line
    assert results[0]["rounds"] == results[1]["rounds"] == [False, True]
    assert results[0]["local_before"] is results[1]["local_before"] is False
    assert (results[0]["source"], results[0]["deadline"]) == ("peer", None)
    assert (results[1]["source"], results[1]["deadline"]) == ("file", 99.0)
    for rank in (0, 1):
        # Each rank registered for the notice signal in its own worker's control dir.
        assert (tmp_path / f"control-{rank}" / "listeners").is_dir()
