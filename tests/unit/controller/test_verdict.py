"""What a running job's workers add up to, as tables."""

from __future__ import annotations

import pytest

from gpuyard.controller.verdict import Outcome, WorkerFacts, settle
from gpuyard.models.worker import WorkerState


def w(
    rank: int,
    state: str = "running",
    code: int | None = None,
    *,
    task: int = 0,
    primary: bool = True,
    told: bool = False,
) -> WorkerFacts:
    return WorkerFacts(
        id=rank,
        rank=rank,
        task=task,
        primary=primary,
        state=WorkerState(state),
        exit_code=code,
        told_to_exit=told,
        node=f"n{rank}",
    )


@pytest.mark.parametrize(
    ("workers", "outcome", "terminate"),
    [
        ([w(0), w(1)], Outcome.CONTINUE, []),
        ([w(0, "exited", 0), w(1)], Outcome.CONTINUE, []),
        ([w(0, "exited", 0), w(1, "exited", 0)], Outcome.SUCCEED, []),
        ([w(0, "exited", 2), w(1)], Outcome.FAIL, []),
        ([w(0, "lost"), w(1, "exited", 0)], Outcome.FAIL, []),
        # MPI: the launcher is done, the targets are still serving -> complete (stop them).
        ([w(0, "exited", 0), w(1, primary=False), w(2, primary=False)], Outcome.COMPLETE, [1, 2]),
        # A target that ends on its own while the launcher runs: something broke.
        ([w(0), w(1, "exited", 0, primary=False)], Outcome.FAIL, []),
        # ...but a target we told to exit is expected to end.
        ([w(0, "exited", 0), w(1, "exited", 143, primary=False, told=True)], Outcome.SUCCEED, []),
    ],
)
def test_a_regular_job(workers: list[WorkerFacts], outcome: Outcome, terminate: list[int]) -> None:
    verdict = settle(workers, batch=False)
    assert verdict.outcome is outcome
    assert [f.rank for f in verdict.terminate] == terminate


def test_the_failure_named_is_the_one_that_happened_first_not_a_casualty() -> None:
    workers = [w(0, "exited", 143, told=True), w(1, "exited", 3)]
    verdict = settle(workers, batch=False)
    assert verdict.failure is not None and verdict.failure.rank == 1


def test_a_batch_sub_task_fails_alone() -> None:
    workers = [w(0, "exited", 3, task=0), w(1, task=0), w(2, task=1), w(3, task=1)]
    verdict = settle(workers, batch=True)
    assert verdict.outcome is Outcome.CONTINUE
    assert [f.rank for f in verdict.terminate] == [1]  # task 0's other worker; task 1 goes on
    assert verdict.notes and "sub-task 0 failed" in verdict.notes[0]


def test_a_batch_job_ends_when_every_worker_has() -> None:
    ok = [w(0, "exited", 0, task=0), w(1, "exited", 0, task=1)]
    assert settle(ok, batch=True).outcome is Outcome.SUCCEED
    mixed = [w(0, "exited", 0, task=0), w(1, "exited", 5, task=1)]
    verdict = settle(mixed, batch=True)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.why.startswith("sub-task 1 failed")


def test_a_batch_sub_task_that_finished_stops_its_helpers() -> None:
    workers = [w(0, "exited", 0, task=0), w(1, primary=False, task=0), w(2, task=1)]
    verdict = settle(workers, batch=True)
    assert verdict.outcome is Outcome.CONTINUE
    assert [f.rank for f in verdict.terminate] == [1]
