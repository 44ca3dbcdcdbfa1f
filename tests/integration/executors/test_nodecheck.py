"""The node check tool as the executor runs it: two real processes (torch, gloo), their verdict
lines and exit statuses, with an injected burn fault and without.

The tool leaves without the interpreter's shutdown once its verdict is printed; what it printed
must all be in the log (a file), as the controller reads it from there.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuyard.executors import nodecheck

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

TOOL = Path(nodecheck.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check(tmp_path: Path, inject: dict[int, str]) -> list[tuple[int, str]]:
    """Run ranks 0 and 1 of a check of nodes a and b; each rank's status and log."""
    port = free_port()
    runs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
        if rank in inject:
            env[nodecheck.INJECT] = inject[rank]
        log = (tmp_path / f"rank-{rank}.log").open("w")
        argv = [sys.executable, "-I", str(TOOL), "--rank", str(rank), "--nodes", "a,b"]
        argv += ["--store", f"127.0.0.1:{port}", "--timeout", "60", "--burn", "0.2"]
        runs.append((subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    done = []
    for rank, (proc, log) in enumerate(runs):
        code = proc.wait(120)
        log.close()
        done.append((code, (tmp_path / f"rank-{rank}.log").read_text()))
    return done


def test_healthy_nodes_pass(tmp_path: Path) -> None:
    for code, log in check(tmp_path, {}):
        assert code == 0, log
        assert "gpuyard-check: PASSED node=" in log.splitlines()[-1], log


def test_a_node_whose_burn_is_corrupted_fails_and_is_named(tmp_path: Path) -> None:
    (healthy, healthy_log), (failed, failed_log) = check(tmp_path, {1: "burn"})
    assert healthy == 0, healthy_log
    assert failed == nodecheck.EXIT_FAILED, failed_log
    assert "gpuyard-check: FAILED node=b test=burn" in failed_log
    assert "differs from the first" in failed_log
