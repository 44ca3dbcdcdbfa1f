"""What a running job's workers add up to: keep running, succeed, complete, or fail.

Pure, so the rules are table-tested (``tests/unit/controller/test_verdict.py``):

- A *primary* worker (one that runs the command) fails when it exits non-zero or is lost.
- A *helper* (an MPI target, a parameter server) fails when it ends before it was told to: it
  serves until the job's primaries are done, so ending early means something broke.
- A regular job fails at its first failure (the rest are stopped). When all its primaries have
  succeeded it *completes*: its helpers are stopped, then it has succeeded.
- A batch job's sub-tasks are independent: a failed sub-task has its own other workers stopped
  and the others go on; a sub-task whose primaries succeeded has its helpers stopped. The job ends
  once every worker has ended: succeeded if every sub-task did, failed otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpuyard.models.worker import WorkerState

__all__ = ["Outcome", "Verdict", "WorkerFacts", "settle"]


@dataclass(frozen=True, slots=True)
class WorkerFacts:
    id: int
    rank: int
    task: int
    primary: bool
    state: WorkerState
    exit_code: int | None = None
    told_to_exit: bool = False
    detail: str = ""
    node: str = ""

    @property
    def ended(self) -> bool:
        return self.state.is_ended()

    @property
    def failed(self) -> bool:
        if not self.ended:
            return False
        if self.primary:
            return self.state is not WorkerState.EXITED or self.exit_code != 0
        return not self.told_to_exit


class Outcome(StrEnum):
    CONTINUE = "continue"
    SUCCEED = "succeed"
    COMPLETE = "complete"
    """Primaries done: stop the helpers, then succeed."""
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    why: str = ""
    failure: WorkerFacts | None = None
    terminate: tuple[WorkerFacts, ...] = ()
    """Live workers to tell to exit now."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Events worth recording (a sub-task failed, a sub-task finished)."""


def _first_failure(workers: Sequence[WorkerFacts]) -> WorkerFacts | None:
    failed = [w for w in workers if w.failed]
    # A worker that failed on its own explains more than one we stopped because of it.
    failed.sort(key=lambda w: (w.told_to_exit, w.rank))
    return failed[0] if failed else None


def _describe(w: WorkerFacts) -> str:
    if w.detail:
        return w.detail
    if not w.primary and w.state is WorkerState.EXITED:
        return f"helper worker {w.rank} on {w.node} ended before the job was done"
    return f"worker {w.rank} on {w.node} failed"


def _live_not_told(workers: Sequence[WorkerFacts]) -> list[WorkerFacts]:
    return [w for w in workers if not w.ended and not w.told_to_exit]


def settle(workers: Sequence[WorkerFacts], *, batch: bool) -> Verdict:
    if not workers:
        return Verdict(Outcome.CONTINUE)
    if not batch:
        return _settle_one(workers)
    tasks = sorted({w.task for w in workers})
    terminate: list[WorkerFacts] = []
    notes: list[str] = []
    failures: dict[int, WorkerFacts] = {}
    for task in tasks:
        group = [w for w in workers if w.task == task]
        failure = _first_failure(group)
        if failure is not None:
            failures[task] = failure
            stop = _live_not_told(group)
            if stop:
                notes.append(
                    f"sub-task {task} failed ({_describe(failure)}); stopping its other workers"
                )
            terminate += stop
        elif all(w.ended for w in group if w.primary):
            terminate += [w for w in _live_not_told(group) if not w.primary]
    if all(w.ended for w in workers):
        if not failures:
            return Verdict(Outcome.SUCCEED, "every sub-task succeeded")
        which = ", ".join(str(t) for t in failures)
        first = failures[min(failures)]
        why = f"sub-task {which} failed: {_describe(first)}"
        return Verdict(Outcome.FAIL, why, first, tuple(terminate), tuple(notes))
    return Verdict(Outcome.CONTINUE, terminate=tuple(terminate), notes=tuple(notes))


def _settle_one(workers: Sequence[WorkerFacts]) -> Verdict:
    failure = _first_failure(workers)
    if failure is not None:
        return Verdict(Outcome.FAIL, _describe(failure), failure)
    if not all(w.ended for w in workers if w.primary):
        return Verdict(Outcome.CONTINUE)
    helpers = [w for w in workers if not w.ended]
    if helpers:
        return Verdict(
            Outcome.COMPLETE,
            "the job's primary workers succeeded; stopping its helper workers",
            terminate=tuple(helpers),
        )
    return Verdict(Outcome.SUCCEED, "every worker exited with status 0")
