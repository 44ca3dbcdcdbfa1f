"""What running jobs' runtimes report in their control files, for the loop
(:mod:`gpuyard.controller.loop`, every :data:`~gpuyard.controller.loop.CONTROL_EVERY` seconds).

When a job last saved a checkpoint and whether it listens for notices go on its row
(preemption picks the victims that lose least); a control file that could not be read is an
event of its job, once per worker and problem; a job that asked to be requeued
(``scontrol requeue`` in a Slurm batch job) is requeued at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update

from gpuyard.clock import Clock
from gpuyard.controller.health import JobErrors, ask_job_by_job
from gpuyard.controller.lifecycle import ACTOR
from gpuyard.controller.suspension import REQUEUE_ASKED
from gpuyard.errors import IllegalTransition, StaleWrite
from gpuyard.executors.base import Executor
from gpuyard.models import JobState
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.worker import ControlState, WorkerState
from gpuyard.services.suspension import begin_suspension
from gpuyard.services.transitions import record_event
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow

__all__ = ["RuntimeReports"]

_Seen = dict[int, tuple[float | None, bool]]
"""Per job: when it last saved a checkpoint, whether it listens for notices."""


class RuntimeReports:
    """Reads the running workers' control files and records what changed."""

    def __init__(self, store: Store, executor: Executor, clock: Clock, errors: JobErrors) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.errors = errors
        self._reported: set[tuple[int, str]] = set()
        """(worker id, problem) pairs already recorded as events."""

    def sync(self) -> None:
        """Record what running jobs' runtimes report: when they last saved a checkpoint, and
        whether they listen for notices (preemption picks the victims that lose least); and,
        once each, the control files that could not be read."""
        rows = [r for r in self._running() if not self.errors.resting(r[1])]
        if not rows:
            return
        known: _Seen = {job_id: (last, listens) for _, job_id, _, last, listens in rows}
        seen: _Seen = {}
        problems: list[tuple[int, int, str]] = []
        requeue: set[int] = set()
        states = self._controls([(job_id, handle) for _, job_id, handle, _, _ in rows])
        for (worker_id, job_id, _, _, _), state in zip(rows, states, strict=True):
            if state is None:
                continue
            if state.requeue_at is not None:
                requeue.add(job_id)
            last, listens = seen.get(job_id, known[job_id])
            at = state.checkpoint_at
            if at is not None and (last is None or at > last):
                last = at
            seen[job_id] = (last, listens or state.listening)
            problems += [
                (worker_id, job_id, p)
                for p in state.invalid
                if (worker_id, p) not in self._reported
            ]
        if requeue:
            self._requeue_asked(requeue)
        changed = {j: v for j, v in seen.items() if v != known[j]}
        if changed or problems:
            self._record(changed, problems)

    def _running(self) -> Sequence[Any]:
        """(worker id, job id, handle, last checkpoint, listens) of every running worker of a
        running job's current attempt."""
        with self.store.read() as session:
            return session.execute(
                select(
                    WorkerRow.id,
                    WorkerRow.job_id,
                    WorkerRow.handle,
                    JobRow.last_checkpoint_at,
                    JobRow.listens,
                )
                .join(JobRow, JobRow.id == WorkerRow.job_id)
                .where(
                    JobRow.state == JobState.RUNNING,
                    WorkerRow.state == WorkerState.RUNNING,
                    WorkerRow.attempt == JobRow.attempt,
                    WorkerRow.handle.is_not(None),
                )
            ).all()

    def _controls(self, rows: Sequence[tuple[int, Any]]) -> list[ControlState | None]:
        """As the loop's worker statuses, for what the workers' runtimes reported."""
        return ask_job_by_job(
            rows,
            self.executor.control,
            self.errors,
            what="reading its workers' control files",
            batch_failed="reading control files failed as a batch; job by job",
        )

    def _record(self, changed: _Seen, problems: Sequence[tuple[int, int, str]]) -> None:
        now = self.clock.now()
        with self.store.write() as session:
            for job_id, (last, listens) in changed.items():
                session.execute(
                    update(JobRow)
                    .where(JobRow.id == job_id)
                    .values(last_checkpoint_at=last, listens=listens)
                )
            for worker_id, job_id, problem in problems:
                self._reported.add((worker_id, problem))
                job = session.get(JobRow, job_id)
                if job is not None:
                    record_event(
                        session,
                        job,
                        kind=EventKind.CONTROL_FILE,
                        actor=ACTOR,
                        time=now,
                        reason=f"ignored a control file of worker {worker_id}: {problem}",
                    )

    def _requeue_asked(self, job_ids: set[int]) -> None:
        """Jobs that asked to be requeued now (``scontrol requeue`` in a Slurm batch job): every
        worker is told to exit at once, and the job goes back to the queue (Slurm ends all of
        a requeued job's steps without notice)."""
        now = self.clock.now()
        for job_id in sorted(job_ids):
            with (
                self.errors.guard(job_id, "requeueing it as it asked"),
                self.store.write() as session,
            ):
                row = session.get(JobRow, job_id)
                if row is None or row.state != JobState.RUNNING:
                    continue
                try:
                    begin_suspension(
                        session,
                        row,
                        actor=Actor.JOB,
                        why=REQUEUE_ASKED,
                        now=now,
                        notice=0.0,
                    )
                except (StaleWrite, IllegalTransition):
                    continue
