"""When a failed job is restarted, and whether its nodes are re-checked first."""

from __future__ import annotations

import pytest

from gpuyard.diagnosis.recovery import EXIT_NO_RESTART, FailureFacts, decide_recovery
from gpuyard.diagnosis.signatures import Suspect, diagnose, scan
from gpuyard.models.faults import FaultTolerance

CUDA = "RuntimeError: CUDA error: an illegal memory access was encountered"
NCCL = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE)"
USER = 'ValueError: could not convert string to float: "abc"'


def facts(*lines_by_rank: tuple[int, str], **kwargs: object) -> FailureFacts:
    observations = []
    for at, (rank, line) in enumerate(lines_by_rank):
        lines = [line]
        if line == USER:  # an exception line counts only as the end of a traceback
            lines = ["Traceback (most recent call last):", '  File "train.py", line 9', line]
        observations += scan(lines, rank=rank, node=f"node{rank}", at=float(at))
    return FailureFacts(diagnosis=diagnose(observations), **kwargs)  # type: ignore[arg-type]


def test_a_node_fault_is_restarted_after_a_recheck_and_names_the_root_not_the_cascade() -> None:
    decision = decide_recovery(FaultTolerance(), 0, facts((3, CUDA), (0, NCCL)))
    assert (decision.restart, decision.recheck, decision.rank, decision.node) == (
        True,
        True,
        3,
        "node3",
    )
    assert decision.why.startswith("restart 1 of 3")


def test_the_jobs_own_error_is_not_restarted_unless_asked() -> None:
    decision = decide_recovery(FaultTolerance(), 0, facts((1, USER)))
    assert not decision.restart
    assert decision.suspect is Suspect.JOB
    assert "retry_job_errors" in decision.why
    retried = decide_recovery(FaultTolerance(retry_job_errors=True), 0, facts((1, USER)))
    assert (retried.restart, retried.recheck) == (True, False)


def test_nothing_recognised_is_restarted_after_a_recheck_with_the_first_failure_as_evidence() -> (
    None
):
    decision = decide_recovery(
        FaultTolerance(),
        1,
        FailureFacts(diagnosis=None, first="worker 1 on node1 was lost", first_node="node1"),
    )
    assert (decision.restart, decision.recheck, decision.node) == (True, True, "node1")
    assert decision.evidence == "worker 1 on node1 was lost"


@pytest.mark.parametrize(
    ("ft", "restarts", "extra", "why"),
    [
        (None, 0, {}, "fault tolerance is off"),
        (FaultTolerance(enabled=False), 0, {}, "fault tolerance is off"),
        (FaultTolerance(max_restarts=2), 2, {}, "budget is spent (2 of 2)"),
        (FaultTolerance(), 0, {"no_restart": (1,)}, f"exited with {EXIT_NO_RESTART}"),
    ],
)
def test_refusals_whatever_the_cause(
    ft: FaultTolerance | None, restarts: int, extra: dict[str, object], why: str
) -> None:
    decision = decide_recovery(ft, restarts, facts((3, CUDA), **extra))
    assert not decision.restart
    assert why in decision.why


def test_without_exception_detection_every_failure_is_restarted_after_a_recheck() -> None:
    decision = decide_recovery(FaultTolerance(detect_exceptions=False), 0, facts((1, USER)))
    assert (decision.restart, decision.recheck) == (True, True)
