"""Signal delivery, for the loop (:mod:`gpuyard.controller.loop`): the signals people sent to
running jobs (``scancel --signal``) and Slurm's ``--signal=[B:]SIG@SECONDS`` before a job's
time limit.

A signal is a row of ``signals`` until it is delivered: to every running worker of the job's
current attempt (``steps``: to their registered steps), or to worker 0's batch shell alone. A
signal for a job that is not running, or whose delivery fails, is marked delivered all the
same: a signal is sent once, never retried (one job's failure is that job's error).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, update

from gpuyard.clock import Clock
from gpuyard.controller.health import JobErrors
from gpuyard.executors.base import Executor
from gpuyard.models import JobState
from gpuyard.models.actor import Actor
from gpuyard.models.worker import Handle, WorkerState
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, SignalRow, WorkerRow

__all__ = ["TIME_LIMIT_ACTOR", "Signals"]

TIME_LIMIT_ACTOR = Actor.TIME_LIMIT
"""Who sends ``--signal=SIG@SECONDS`` before a job's time limit."""


class Signals:
    """Queues the time limit's signals and delivers every pending one through the executor."""

    def __init__(self, store: Store, executor: Executor, clock: Clock, errors: JobErrors) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.errors = errors

    def before_limit(self) -> bool:
        """Slurm's ``--signal=[B:]SIG@SECONDS``: that long before a job's time limit, its steps
        (or batch shell) get the signal, once per attempt. Whether one is now due."""
        now = self.clock.now()
        due = self._limit_signals_due(now)
        if not due:
            return False
        return self._queue(due, now)

    def _limit_signals_due(self, now: float) -> list[tuple[int, int, bool]]:
        """(job, signal, to its steps) for running jobs within their signal's time of the limit."""
        with self.store.read() as session:
            rows = session.scalars(
                select(JobRow).where(
                    JobRow.state == JobState.RUNNING,
                    JobRow.limit_signal.is_not(None),
                    JobRow.started_at + JobRow.max_runtime - JobRow.limit_signal <= now,
                )
            ).all()
            due: list[tuple[int, int, bool]] = []
            for row in rows:
                spec = row.loaded_spec()
                wanted = spec.slurm.signal if spec is not None and spec.slurm is not None else None
                if wanted is not None:
                    due.append((row.id, wanted.signal, not wanted.batch))
        return due

    def _queue(self, due: Sequence[tuple[int, int, bool]], now: float) -> bool:
        """Add the signals of ``due`` not yet sent in their job's attempt; whether any was."""
        added = False
        with self.store.write() as session:
            for job_id, signum, steps in due:
                sent = session.scalar(
                    select(func.count())
                    .select_from(SignalRow)
                    .join(JobRow, JobRow.id == SignalRow.job_id)
                    .where(
                        SignalRow.job_id == job_id,
                        SignalRow.actor == TIME_LIMIT_ACTOR,
                        SignalRow.created_at >= JobRow.started_at,
                    )
                )
                if not sent:
                    added = True
                    session.add(
                        SignalRow(
                            job_id=job_id,
                            signal=signum,
                            steps=steps,
                            actor=TIME_LIMIT_ACTOR,
                            created_at=now,
                        )
                    )
        return added

    def deliver(self) -> None:
        """Deliver the signals people sent (``scancel --signal``) and the time limit's."""
        pending, workers = self._pending()
        if not pending:
            return
        by_job: dict[int, list[tuple[int, Handle]]] = defaultdict(list)
        for job_id, rank, handle in workers:
            by_job[job_id].append((rank, handle))
        for _, job_id, signum, steps in pending:
            with self.errors.guard(job_id, "delivering a signal"):
                for rank, handle in by_job.get(job_id, []):
                    if steps or rank == 0:
                        self.executor.signal(handle, signum, steps=steps)
        now = self.clock.now()
        with self.store.write() as session:
            session.execute(
                update(SignalRow)
                .where(SignalRow.id.in_([row[0] for row in pending]))
                .values(delivered_at=now)
            )

    def _pending(self) -> tuple[Sequence[Any], Sequence[Any]]:
        """The undelivered signals (id, job, signal, steps), oldest first, and the running
        workers of their jobs' current attempts (job, rank, handle)."""
        with self.store.read() as session:
            pending = session.execute(
                select(SignalRow.id, SignalRow.job_id, SignalRow.signal, SignalRow.steps)
                .where(SignalRow.delivered_at.is_(None))
                .order_by(SignalRow.id)
                .limit(1000)
            ).all()
            if not pending:
                return pending, []
            job_ids = {job_id for _, job_id, _, _ in pending}
            workers = session.execute(
                select(WorkerRow.job_id, WorkerRow.rank, WorkerRow.handle)
                .join(JobRow, JobRow.id == WorkerRow.job_id)
                .where(
                    WorkerRow.job_id.in_(job_ids),
                    JobRow.state == JobState.RUNNING,
                    WorkerRow.attempt == JobRow.attempt,
                    WorkerRow.state == WorkerState.RUNNING,
                    WorkerRow.handle.is_not(None),
                )
            ).all()
        return pending, workers
