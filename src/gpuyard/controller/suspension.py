"""Carry a suspending job through the protocol of docs/preemption.md, one pass at a time.

Each pass over a job in ``suspending``:

1. sends the notice (flag file + signal) to every live worker that has not had it, and to a
   Slurm batch job Slurm's own notice (:func:`slurm_preemption_signals`);
2. reads what the workers' runtimes wrote back (acknowledgement, checkpoints) and records it;
3. once the deadline has passed, tells the workers still running to exit (SIGTERM, SIGKILL
   after the graceful period, as a stop does; at once when the job asked to be requeued);
4. once every worker has exited, requeues the job at its original position, or, if its
   primaries had in fact all finished with status 0, lets it succeed.
"""

from __future__ import annotations

import signal as _signals
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update

from gpuyard.clock import Clock
from gpuyard.controller.job_actions import JobActions
from gpuyard.executors.base import Executor
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.job import JobMode, JobSpec
from gpuyard.models.states import JobState
from gpuyard.models.worker import ControlState, Notice, WorkerState
from gpuyard.quantities import format_duration
from gpuyard.services.suspension import finish_suspension
from gpuyard.services.transitions import record_event, transition
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow

__all__ = ["EXIT_SUSPENDED", "REQUEUE_ASKED", "Suspender"]

EXIT_SUSPENDED = 75
"""The exit code of ``gpuyard.runtime.suspend()`` (sysexits' EX_TEMPFAIL)."""
ACTOR = Actor.CONTROLLER
REQUEUE_ASKED = "the job asked to be requeued (scontrol requeue)"
"""Why a job that requeued itself is suspended: Slurm ends a requeued job's steps without its
``--signal`` (that signal is for preemption and the time limit)."""


@dataclass
class Suspender:
    store: Store
    executor: Executor
    clock: Clock
    actions: JobActions
    """The row guard and the drain of the lifecycle that owns this suspender."""

    def advance(self, job: JobRow, workers: list[WorkerRow]) -> None:
        now = self.clock.now()
        deadline = job.suspend_deadline if job.suspend_deadline is not None else now
        live = [w for w in workers if w.state is WorkerState.RUNNING and w.handle is not None]
        unnotified = [w for w in live if w.notice_sent_at is None]
        notice = Notice(now, deadline, job.reason or "the platform needs its resources", ACTOR)
        asked = job.reason == REQUEUE_ASKED
        slurm_signals = (
            slurm_preemption_signals(job.loaded_spec()) if unnotified and not asked else []
        )
        for w in unnotified:
            self.executor.notify(w.handle or {}, notice)
            for signum, steps in slurm_signals:
                if steps or w.rank == 0:
                    self.executor.signal(w.handle or {}, signum, steps=steps)
        handled = [w for w in workers if w.handle is not None]
        states = self.executor.control([w.handle or {} for w in handled])
        with self.store.write() as session:
            if unnotified:
                self._record_notices(session, job, unnotified, deadline, now)
            self._record_control(session, job, list(zip(handled, states, strict=True)), now)
        if now >= deadline and live:
            # A job that asked to be requeued has nobody to warn and nothing to save: its
            # workers are ended at once, not after the graceful period (docs/slurm.md).
            self.actions.drain(job, JobState.SUSPENDING, workers, grace=0.0 if asked else None)
        if all(w.state.is_ended() for w in workers):
            self._requeue(job, workers, now)

    def _record_notices(
        self, session: Any, job: JobRow, workers: list[WorkerRow], deadline: float, now: float
    ) -> None:
        for w in workers:
            session.execute(
                update(WorkerRow).where(WorkerRow.id == w.id).values(notice_sent_at=now)
            )
        ranks = ", ".join(str(w.rank) for w in workers)
        record_event(
            session,
            job,
            kind=EventKind.NOTICE,
            actor=ACTOR,
            time=now,
            reason=f"preemption notice sent to worker {ranks}: checkpoint and exit within "
            f"{format_duration(max(0.0, deadline - now))}",
        )

    def _record_control(
        self,
        session: Any,
        job: JobRow,
        pairs: list[tuple[WorkerRow, ControlState]],
        now: float,
    ) -> None:
        newest = job.last_checkpoint_at
        for w, state in pairs:
            if state.acknowledged_at is not None and w.acknowledged_at is None:
                session.execute(
                    update(WorkerRow)
                    .where(WorkerRow.id == w.id)
                    .values(acknowledged_at=state.acknowledged_at)
                )
                record_event(
                    session,
                    job,
                    kind=EventKind.ACKNOWLEDGED,
                    actor=Actor.worker(w.rank),
                    node=w.node,
                    time=now,
                    reason=f"worker {w.rank} acknowledged the notice",
                )
            if state.checkpoint_at is not None and (newest is None or state.checkpoint_at > newest):
                newest = state.checkpoint_at
                step = (
                    f" at step {state.checkpoint_step}" if state.checkpoint_step is not None else ""
                )
                record_event(
                    session,
                    job,
                    kind=EventKind.CHECKPOINT,
                    actor=Actor.worker(w.rank),
                    node=w.node,
                    time=now,
                    reason=f"worker {w.rank} saved a checkpoint{step}",
                )
        if newest != job.last_checkpoint_at:
            # Not a state change: no version bump, and the job may move on meanwhile.
            session.execute(
                update(JobRow).where(JobRow.id == job.id).values(last_checkpoint_at=newest)
            )

    def _requeue(self, job: JobRow, workers: list[WorkerRow], now: float) -> None:
        primaries = [w for w in workers if w.primary]
        finished = primaries and all(
            w.state is WorkerState.EXITED and w.exit_code == 0 for w in primaries
        )
        with self.store.write() as session:
            row = self.actions.fresh(session, job)
            if row is None:
                return
            if finished:
                transition(
                    session,
                    row,
                    JobState.SUCCEEDED,
                    actor=ACTOR,
                    why="every worker exited with status 0 before the suspension took effect",
                    time=now,
                    exit_code=0,
                    reason=None,
                )
                return
            killed = [w.rank for w in workers if w.detail and "SIGKILL" in w.detail]
            acked = [w.rank for w in workers if w.acknowledged_at is not None]
            why = "every worker has exited; back in the queue at its original position"
            why += f", to resume as attempt {row.attempt + 1}"
            if killed:
                lost = (
                    f"since its last checkpoint ({format_duration(now - row.last_checkpoint_at)} "
                    "ago)"
                    if row.last_checkpoint_at is not None
                    else "since it started (it saved no checkpoint)"
                )
                why += (
                    f". Worker {', '.join(map(str, killed))} did not exit by the deadline and "
                    f"was SIGKILLed: the work {lost} is lost"
                )
            elif not acked:
                why += ". No worker acknowledged the notice"
            finish_suspension(session, row, actor=ACTOR, why=why, now=now)


def slurm_preemption_signals(spec: JobSpec | None) -> list[tuple[int, bool]]:
    """What a preempted Slurm batch job is sent when its notice period begins, as
    ``(signal, to the steps)`` pairs: SIGCONT, then the job's ``--signal`` (to its steps, or
    to its batch shell with ``B:``) if it has one, else SIGTERM to its steps. That is Slurm's
    preemption with ``SlurmctldParameters=preempt_send_user_signal`` (``_preempt_signal`` in
    slurmctld): submitit's and Lightning's checkpoint-and-requeue handlers listen for the
    ``--signal`` they asked for (``USR2@90``, ``SIGUSR1@90``) and never see SIGTERM as the
    moment to save. The job then has the pool's notice period before SIGTERM and SIGKILL, as
    Slurm's GraceTime. Empty for jobs of other modes (their runtime has the notice)."""
    if spec is None or spec.mode is not JobMode.SLURM:
        return []
    wanted = spec.slurm.signal if spec.slurm is not None else None
    signals = [(int(_signals.SIGCONT), True)]
    if wanted is not None:
        signals.append((wanted.signal, not wanted.batch))
    else:
        signals.append((int(_signals.SIGTERM), True))
    return signals


def asked_to_suspend(workers: list[WorkerRow], states: list[ControlState]) -> WorkerRow | None:
    """The worker that suspended itself, if one did: it exited with the suspended code, or
    exited after its runtime wrote ``suspended.json`` (a launcher in between may have turned
    75 into its own failure code)."""
    for w, state in zip(workers, states, strict=True):
        if w.state is not WorkerState.EXITED:
            continue
        if w.exit_code == EXIT_SUSPENDED or state.suspended_at is not None:
            return w
    return None
