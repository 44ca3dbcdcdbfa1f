"""The node check as the platform runs it: real processes, torch, gloo over loopback, each
rank's output in a file (the tool leaves without the interpreter's shutdown once its verdict
is printed; all of it must be in its log, where the controller reads it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gpuyard.injob import nodecheck

TOOL = nodecheck.__file__


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(
    ranks: Sequence[int], nodes: Sequence[str], *, inject: dict[int, str] | None = None
) -> dict[int, tuple[int, str]]:
    """Start one check per rank, as the platform does; each rank's exit status and log."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for rank in ranks:
            env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
            if inject and rank in inject:
                env[nodecheck.INJECT] = inject[rank]
            argv = [sys.executable, "-I", TOOL, "--rank", str(rank), "--nodes", ",".join(nodes)]
            argv += ["--store", f"127.0.0.1:{port}", "--timeout", "4", "--burn", "0.2"]
            with (Path(tmp) / f"rank-{rank}.log").open("w") as log:
                procs[rank] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        return {
            rank: (p.wait(60), (Path(tmp) / f"rank-{rank}.log").read_text())
            for rank, p in procs.items()
        }


def test_healthy_nodes_pass_burn_and_collective_and_say_the_gpu_burn_was_not_run() -> None:
    results = run([0, 1], ["a", "b"])
    for rank, (code, out) in results.items():
        assert code == 0, out
        assert f"PASSED node={'ab'[rank]}" in out
        assert "GPU burn: not available" in out  # no GPU here: never claimed healthy
        assert "gloo all-reduce of 16 MiB across 2 nodes" in out


def test_a_corrupting_node_fails_its_own_burn() -> None:
    ((code, out),) = run([0], ["a"], inject={0: "burn"}).values()
    assert code == nodecheck.EXIT_FAILED
    assert "FAILED node=a test=burn cpu: product 1 differs from the first" in out


def test_corrupted_data_in_the_collective_is_blamed_on_the_sender_by_every_rank() -> None:
    results = run([0, 1, 2], ["a", "b", "c"], inject={2: "collective"})
    for code, out in results.values():
        assert code == nodecheck.EXIT_FAILED
        assert "FAILED node=c test=collective rank 2: its data arrived corrupted" in out


def test_a_node_that_never_arrives_is_named_when_the_others_did() -> None:
    results = run([0, 1], ["a", "b", "c"])
    code, out = results[0]
    assert code == nodecheck.EXIT_FAILED, out
    assert "FAILED node=c test=collective rank 2: did not reach the rendezvous" in out
    assert results[1][0] == nodecheck.EXIT_INCONCLUSIVE


def test_of_two_nodes_one_missing_cannot_be_told_apart() -> None:
    code, out = run([0], ["a", "b"])[0]
    assert code == nodecheck.EXIT_INCONCLUSIVE
    assert "cannot tell which of the two" in out


def test_below_the_pools_floor_the_check_fails_without_blaming_a_node() -> None:
    port = free_port()
    argv = [sys.executable, "-I", TOOL, "--nodes", "a,b", "--store", f"127.0.0.1:{port}"]
    argv += ["--timeout", "4", "--burn", "0.1", "--floor", "100000"]
    procs = [
        subprocess.Popen([*argv, "--rank", str(r)], stdout=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    for proc in procs:
        out = proc.communicate(timeout=60)[0]
        assert proc.returncode == nodecheck.EXIT_INCONCLUSIVE, out
        assert "below the pool's floor 100000 GB/s" in out
        assert "FAILED" not in out
