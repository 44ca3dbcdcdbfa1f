"""A node check's verdict, read from its workers' logs."""

from __future__ import annotations

from gpuyard.diagnosis.checks import CheckFailure, check_failures, inconclusive


def test_blamed_nodes_once_each_with_the_first_evidence_and_only_nodes_of_the_check() -> None:
    lines = [
        "gpuyard-check: burn: CPU: 12 products of 256x256 checked",
        "gpuyard-check: FAILED node=node1 test=burn cpu: product 1 differs from the first",
        "gpuyard-check: FAILED node=node1 test=collective rank 1: its data arrived corrupted",
        "gpuyard-check: FAILED node=elsewhere test=burn not a node of this check",
        "  gpuyard-check: FAILED node=node0 test=burn indented: not the tool's own line",
    ]
    assert check_failures(lines, ["node0", "node1"]) == [
        CheckFailure("node1", "burn", "cpu: product 1 differs from the first")
    ]


def test_inconclusive_lines() -> None:
    lines = ["gpuyard-check: INCONCLUSIVE node=node0 the other node did not reach it"]
    assert inconclusive(lines) == ["node0: the other node did not reach it"]
    assert inconclusive(["gpuyard-check: PASSED node=node0"]) == []
