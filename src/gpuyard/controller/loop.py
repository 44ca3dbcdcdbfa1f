"""The reconcile loop: load -> decide -> apply, and keep every job's workers in step.

One pass (:meth:`Controller.tick`):

1. **Sync workers.** Ask the executor about workers that have not ended; record exits and
   losses on the worker rows and in the job's events.
2. **Advance jobs.** Each job that holds resources takes one step
   (:mod:`gpuyard.controller.lifecycle`): launch, settle, drain, suspend, expire.
3. **Schedule.** Load a snapshot, call the pure :func:`gpuyard.scheduler.decide`, apply its
   starts and suspensions with guarded writes, record waiting reasons
   (:mod:`gpuyard.controller.apply`).

Besides, a pass records the executor's nodes when they come and go
(:mod:`gpuyard.controller.nodes`), every :data:`CONTROL_EVERY` seconds reads what the running
jobs' runtimes report (:mod:`gpuyard.controller.reports`), and delivers the signals sent to
jobs (:mod:`gpuyard.controller.signals`).

Passes are *targeted* or *full*. A supervisor's poke names its worker and a person's stop
names its job, so most passes look only at what changed: one worker's status, one job's
step. A full pass, at least every :data:`FULL_EVERY` seconds, asks about every worker (the
poke is best effort) and steps every job with a step to take (deadlines such as a max runtime
need a look even when nothing pokes); every :data:`COMPLETE_EVERY` seconds, and after a pass
failed, it steps every job that holds resources.

One job's failure stays that job's (:mod:`gpuyard.controller.health`): each job's piece of a
pass is guarded, a job whose work keeps failing is given up on, and a pass that fails as a
whole backs off before the next try.

Slow work runs beside the loop, on threads of its own, never inside a pass: launches
(:mod:`gpuyard.controller.launcher`), queue forecasts (:mod:`gpuyard.controller.forecaster`)
and the periodic inspection of the nodes' health (:mod:`gpuyard.controller.inspection`), which
cordons a node on a new critical finding.

No transaction is open across executor I/O: every pass reads, closes the session, talks to
the executor, then writes in a short transaction whose UPDATEs are guarded by id + version.
A decision made on a stale read changes nothing and is retried on the next pass.

Usage sampling (what workers and nodes use, :mod:`gpuyard.controller.sampler`) and queue
forecasts run on threads of their own beside the loop, so that neither slows a pass.

Adoption after a restart needs no special path: worker handles live in the store, the
executor answers for them, and ``launch`` of a worker that already exists returns it instead
of starting a second copy.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

from sqlalchemy import and_, or_, select, tuple_

from gpuyard.clock import Clock
from gpuyard.controller.apply import Applier
from gpuyard.controller.data_locality import DataLocality
from gpuyard.controller.forecaster import Forecaster
from gpuyard.controller.health import (
    GIVE_UP_AFTER,
    JobErrors,
    LoopHealth,
    ask_job_by_job,
    describe,
)
from gpuyard.controller.inspection import INSPECT_EVERY, Inspector
from gpuyard.controller.launcher import Launcher
from gpuyard.controller.lifecycle import ACTOR, LaunchConfig, Lifecycle, describe_exit
from gpuyard.controller.nodes import Nodes
from gpuyard.controller.reports import RuntimeReports
from gpuyard.controller.sampler import UsageSampler
from gpuyard.controller.signals import Signals
from gpuyard.errors import StaleWrite
from gpuyard.executors.base import Executor
from gpuyard.models import JobState
from gpuyard.models.events import EventKind
from gpuyard.models.states import HOLDING
from gpuyard.models.usage import DEFAULT_INTERVAL
from gpuyard.models.worker import Handle, NodeInfo, WorkerKey, WorkerState, WorkerStatus
from gpuyard.services.transitions import record_event
from gpuyard.store.durations import RunTimes
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow
from gpuyard.store.workers import set_worker_state

__all__ = ["Controller", "LaunchConfig"]

log = logging.getLogger("gpuyard.controller")

SCHEDULE_EVERY = 5.0
"""Seconds between scheduling passes when nothing asks for one."""
MAX_SCHEDULE_GAP = 1.0
CONTROL_EVERY = 5.0
"""Seconds between reads of running workers' runtime reports (checkpoints, listeners)."""
FULL_EVERY = 2.0
"""Seconds between full passes (every worker's status; every job with a step to take)."""
COMPLETE_EVERY = 30.0
"""Seconds between passes that step every job that holds resources, whatever is known of it
(after a restart, say, a worker's exit may be recorded and its job not yet settled)."""
_MOVING = tuple(s for s in HOLDING if s is not JobState.RUNNING)
BACKOFF_MAX = 30.0
"""Longest wait after a pass that failed as a whole."""


class Controller:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        *,
        clock: Clock,
        interval: float = 0.5,
        control_url: str = "",
        launch_config: LaunchConfig | None = None,
        stall_after: float = 30.0,
        alert: Callable[[dict[str, Any]], None] | None = None,
        inspect_every: float = INSPECT_EVERY,
        usage_interval: float = DEFAULT_INTERVAL,
        predict_run_times: bool = True,
    ) -> None:
        """``alert``: where alerts go besides the jobs' logs (the pool's webhook).
        ``inspect_every``: seconds between inspections of the nodes' health, run beside the
        loop (:mod:`gpuyard.controller.inspection`); 0 for none. ``usage_interval``: seconds
        between usage samples. ``predict_run_times``: learn run times from the jobs that
        ended and give them to the scheduler (docs/scheduling.md#predicted-run-times)."""
        self.store = store
        self.executor = executor
        self.clock = clock
        self.interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._dirty = True
        """The queue or the pool changed: schedule soon."""
        self._touched_workers: set[WorkerKey] = set()
        self._touched_jobs: set[int] = set()
        self._look_at_all = True
        self._last_full = -FULL_EVERY
        self._last_complete = -COMPLETE_EVERY
        self._last_schedule = 0.0
        self._next_schedule = 0.0
        self._last_control_sync = -CONTROL_EVERY
        self._backoff = 0.0
        self.nodes = Nodes(store, executor, clock, changed=self._mark_dirty)
        self.health_state = LoopHealth(started_at=clock.now(), stall_after=stall_after)
        self._started = clock.monotonic()
        self.errors = JobErrors(
            clock=clock.monotonic,
            on_error=self._record_error,
            health=self.health_state,
            wall=clock.now,
        )
        self.locality = DataLocality(executor, clock)
        """The nodes' dataset copies and the copy rate, for the passes and the forecasts."""
        self.lifecycle = Lifecycle(
            store,
            executor,
            clock=clock,
            control_url=control_url,
            launch_config=launch_config or LaunchConfig(),
            gpu_devices=self.nodes.gpu_devices,
            mark_dirty=self._mark_dirty,
            alert=alert,
            look_again=self._look_again,
            data_copied=self.locality.copied,
        )
        self.run_times = RunTimes() if predict_run_times else None
        """Shared by the passes and the forecasts."""
        self.forecaster = Forecaster(store, clock, run_times=self.run_times, data=self.locality)
        self.inspector = Inspector(
            store, executor, clock, every=inspect_every, cordoned=self.notify
        )
        self.sampler = UsageSampler(store, executor, clock, interval=usage_interval)
        self.signals = Signals(store, executor, clock, self.errors)
        self.reports = RuntimeReports(store, executor, clock, self.errors)
        self.launcher = Launcher(
            store, launch=self.lifecycle.advance, errors=self.errors, done=self._launched
        )
        self.applier = Applier(
            store,
            clock,
            launch=self.launcher.submit,
            mark_dirty=self._mark_dirty,
            errors=self.errors,
            give_up=self._give_up_on,
            run_times=self.run_times,
            data=self.locality,
        )

    # -- running --------------------------------------------------------------------------

    def _mark_dirty(self) -> None:
        self._dirty = True

    def wake(self, worker: WorkerKey | None = None) -> None:
        """A worker may have changed (the executor's callback): look at it soon; None: at
        every worker."""
        with self._lock:
            if worker is None:
                self._look_at_all = True
            else:
                self._touched_workers.add(worker)
        self._wake.set()

    def notify(self, job_id: int | None = None) -> None:
        """A person changed ``job_id`` (stopped, suspended, re-prioritized it), or, with None,
        the queue or the pool: take the job's next step and schedule soon."""
        with self._lock:
            if job_id is not None:
                self._touched_jobs.add(job_id)
            self._dirty = True
        self._wake.set()

    def start(self) -> None:
        self.register_nodes()
        self.executor.set_wakeup(self.wake)
        self.launcher.start()
        self.forecaster.start()
        self.inspector.start()
        self.sampler.start()
        self._thread = threading.Thread(target=self._run, name="gpuyard-controller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop. Workers keep running; the next controller adopts them."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.launcher.stop()
        self.forecaster.stop()
        self.inspector.stop()
        self.sampler.stop()

    def _launched(self, job_id: int) -> None:
        """The launcher is done with ``job_id``: look at it again (a stop may have come)."""
        self._look_again(job_id)

    def _look_again(self, job_id: int) -> None:
        """Step ``job_id`` in the next pass, targeted or full."""
        with self._lock:
            self._touched_jobs.add(job_id)
        self._wake.set()

    def health(self) -> dict[str, Any]:
        """What ``/health`` reports about the loop; ``progressing`` False means stalled."""
        h = self.health_state
        alive = self._thread is not None and self._thread.is_alive()
        now = self.clock.monotonic()
        return {
            "alive": alive,
            "progressing": alive and h.progressing(now, self._started),
            "started_at": h.started_at,
            "last_pass_at": h.last_pass_at,
            "seconds_since_last_pass": None if h.last_pass is None else now - h.last_pass,
            "passes": h.passes,
            "pass_seconds": h.pass_seconds,
            "schedules": h.schedules,
            "schedule_seconds": h.schedule_seconds,
            "last_schedule_seconds": h.last_schedule_seconds,
            "failed_passes": h.failed_passes,
            "recent_errors": list(h.recent),
        }

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            now = self.clock.monotonic()
            due = (self._dirty and now >= self._next_schedule) or (
                now - self._last_schedule >= SCHEDULE_EVERY
            )
            wait = self.interval
            try:
                self.tick(schedule=due, full=now - self._last_full >= FULL_EVERY)
            except Exception as exc:  # the loop must outlive any one bad pass
                self._failed_pass(exc)
                # Back off whatever wakes us meanwhile: a busy API must not make it spin.
                self._stop.wait(self._backoff)
                continue
            self._backoff = 0.0
            if self._dirty:
                wait = max(0.0, min(wait, self._next_schedule - self.clock.monotonic()))
            self._wake.wait(wait)

    def _failed_pass(self, exc: Exception) -> None:
        h = self.health_state
        h.failed_passes += 1
        message = describe(exc)
        if not h.recent or h.recent[-1]["error"] != message:
            log.exception("reconcile pass failed")  # once per distinct failure, not per pass
        h.error(self.clock.now(), message)
        self._backoff = min(BACKOFF_MAX, max(self.interval, 2 * self._backoff))
        with self._lock:
            self._look_at_all = True  # what the failed pass took is looked at again

    def tick(self, *, schedule: bool = True, full: bool = True) -> None:
        """One reconcile pass; ``full`` looks at every worker and job, not only at those that
        poked or were changed. The loop skips scheduling while a burst of wake-ups arrives
        faster than passes finish: a scheduling pass costs in proportion to the queue, so
        passes are spaced at least twice their own duration apart (at most a second)."""
        everything, workers, jobs = self._take_touched()
        full = full or everything
        began = self.clock.monotonic()
        self.errors.begin_pass()
        self._refresh_nodes(began)
        if full:
            self._last_full = began
        complete = full and (everything or began - self._last_complete >= COMPLETE_EVERY)
        if complete:
            self._last_complete = began
        ended = self._sync_workers(None if full else workers)
        if complete:
            self._advance_jobs(None)
        elif full:
            self._advance_jobs(self._due() | self.errors.jobs() | jobs | ended)
        else:
            self._advance_jobs(jobs | ended)
        limit_signals = False
        if began - self._last_control_sync >= CONTROL_EVERY:
            self._last_control_sync = began
            self.reports.sync()
            limit_signals = self.signals.before_limit()
        if full or jobs or limit_signals:
            # A signal someone sent pokes its job (jobs); a full pass catches the rest.
            self.signals.deliver()
        if schedule:
            self._schedule()
        if not self.launcher.running:
            self.launcher.launch_now()  # driven pass by pass (tests): launch within the pass
        self.errors.end_pass()
        ended_at = self.clock.monotonic()
        self.health_state.passed(ended_at, self.clock.now(), ended_at - began)

    def _take_touched(self) -> tuple[bool, set[WorkerKey], set[int]]:
        """What woke the loop since the last pass: everything, or these workers and jobs."""
        with self._lock:
            everything = self._look_at_all
            workers, jobs = self._touched_workers, self._touched_jobs
            self._touched_workers, self._touched_jobs = set(), set()
            self._look_at_all = False
        return everything, workers, jobs

    def _schedule(self) -> None:
        """Decide and apply; the next scheduling pass waits at least twice this one's time."""
        self._dirty = False
        started = self.clock.monotonic()
        self.applier.run()
        self.forecaster.changed()  # it forecasts again within a few seconds
        finished = self.clock.monotonic()
        self.health_state.scheduled(finished - started)
        self._last_schedule = started
        self._next_schedule = finished + min(MAX_SCHEDULE_GAP, 2 * (finished - started))

    # -- nodes ----------------------------------------------------------------------------

    def _refresh_nodes(self, began: float) -> None:
        """Read the executor's nodes again when they come and go (:meth:`Nodes.refresh`); a
        node that left has its workers looked at now."""
        if self.nodes.refresh(began):
            with self._lock:
                self._look_at_all = True

    def register_nodes(self, nodes: Sequence[NodeInfo] | None = None) -> None:
        """Record the executor's nodes (``nodes``: as just read); nodes it no longer presents
        become ``gone``."""
        self.nodes.register(nodes)

    # -- 1. sync workers ------------------------------------------------------------------

    def _sync_workers(self, only: Collection[WorkerKey] | None) -> set[int]:
        """Record the workers that ended; return the ids of their jobs. ``only``: just these
        workers (None: every running worker)."""
        if only is not None and not only:
            return set()
        rows = [r for r in self._running_workers(only) if not self.errors.resting(r[1])]
        if not rows:
            return set()
        statuses = self._statuses([(job_id, handle) for _, job_id, handle in rows])
        ended = [
            (worker_id, st)
            for (worker_id, _, _), st in zip(rows, statuses, strict=True)
            if st is not None and st.state is not WorkerState.RUNNING
        ]
        if not ended:
            return set()
        now = self.clock.now()
        jobs: set[int] = set()
        suspended = self._suspended_themselves(rows, ended)
        with self.store.write() as session:
            for worker_id, st in ended:
                worker = session.get(WorkerRow, worker_id)
                if worker is None or worker.state is not WorkerState.RUNNING:
                    continue
                job = session.get(JobRow, worker.job_id)
                lost = st.state is WorkerState.LOST
                detail = describe_exit(worker, st, job, suspended=worker_id in suspended)
                set_worker_state(
                    session,
                    worker,
                    WorkerState.LOST if lost else WorkerState.EXITED,
                    exit_code=st.exit_code,
                    finished_at=st.finished_at or now,
                    detail=detail,
                )
                jobs.add(worker.job_id)
                if job is not None:
                    record_event(
                        session,
                        job,
                        kind=EventKind.WORKER_LOST if lost else EventKind.WORKER_EXITED,
                        actor=ACTOR,
                        reason=detail,
                        node=worker.node,
                        time=now,
                    )
        self._dirty = True
        return jobs

    def _suspended_themselves(
        self, rows: Sequence[Any], ended: Sequence[tuple[int, WorkerStatus]]
    ) -> set[int]:
        """The ended workers whose runtime wrote ``suspended.json`` before a failing exit: a
        launcher such as torchrun reports its own code (1) for a rank's 75. Read only for
        those, once, when they end; an unreadable control directory counts as not."""
        handles = {worker_id: handle for worker_id, _, handle in rows}
        failed = [
            worker_id
            for worker_id, st in ended
            if st.state is WorkerState.EXITED and st.exit_code not in (None, 0) and not st.signal
        ]
        if not failed:
            return set()
        try:
            states = self.executor.control([handles[w] for w in failed])
        except Exception:  # only the wording of the exit depends on it
            return set()
        return {w for w, state in zip(failed, states, strict=True) if state.suspended_at}

    def _running_workers(self, only: Collection[WorkerKey] | None) -> list[Any]:
        """(worker id, job id, handle) of the running workers (``only``: of these)."""
        query = select(WorkerRow.id, WorkerRow.job_id, WorkerRow.handle).where(
            WorkerRow.state == WorkerState.RUNNING, WorkerRow.handle.is_not(None)
        )
        with self.store.read() as session:
            if only is None:
                return list(session.execute(query).all())
            rows: list[Any] = []
            keys = [(k.job_id, k.attempt, k.rank) for k in only]
            for chunk in range(0, len(keys), 300):  # bind-parameter limits
                rows += session.execute(
                    query.where(
                        tuple_(WorkerRow.job_id, WorkerRow.attempt, WorkerRow.rank).in_(
                            keys[chunk : chunk + 300]
                        )
                    )
                ).all()
            return rows

    def _statuses(self, rows: Sequence[tuple[int, Handle]]) -> list[WorkerStatus | None]:
        """The executor's answer for each (job, handle); None where it could not answer
        (:func:`~gpuyard.controller.health.ask_job_by_job`)."""
        return ask_job_by_job(
            rows,
            self.executor.status,
            self.errors,
            what="reading its workers' status",
            batch_failed="worker status failed as a batch; asking job by job",
        )

    # -- 2. advance jobs ------------------------------------------------------------------

    def _advance_jobs(self, only: Collection[int] | None) -> None:
        """One step for each job that holds resources (``only``: just these jobs)."""
        if only is not None and not only:
            return
        query = select(JobRow).where(JobRow.state.in_(HOLDING))
        with self.store.read() as session:
            if only is None:
                jobs = list(session.scalars(query.order_by(JobRow.id)))
            else:
                ids = sorted(only)
                jobs = []
                for chunk in range(0, len(ids), 500):
                    jobs += session.scalars(query.where(JobRow.id.in_(ids[chunk : chunk + 500])))
            workers: dict[int, list[WorkerRow]] = {job.id: [] for job in jobs}
            attempts = {job.id: job.attempt for job in jobs}
            ids = list(workers)
            for chunk in range(0, len(ids), 500):
                for w in session.scalars(
                    select(WorkerRow)
                    .where(WorkerRow.job_id.in_(ids[chunk : chunk + 500]))
                    .order_by(WorkerRow.rank)
                ):
                    if w.attempt == attempts[w.job_id]:
                        workers[w.job_id].append(w)
        for job in jobs:
            self._step(job, workers[job.id])

    def _due(self) -> set[int]:
        """The jobs a full pass steps besides those whose workers ended: every job on its
        way somewhere (starting, draining, suspending), and running jobs past their max
        runtime or watched for hangs. A running job with nothing new waits for its workers'
        news."""
        now = self.clock.now()
        with self.store.read() as session:
            return set(
                session.scalars(
                    select(JobRow.id).where(
                        or_(
                            JobRow.state.in_(_MOVING),
                            and_(
                                JobRow.state == JobState.RUNNING,
                                JobRow.max_runtime.is_not(None),
                                JobRow.started_at + JobRow.max_runtime <= now,
                            ),
                            # Watched for hangs or slowness (looked at about once a second).
                            and_(
                                JobRow.state == JobState.RUNNING,
                                or_(
                                    JobRow.hang_timeout.is_not(None),
                                    JobRow.perf_window.is_not(None),
                                ),
                            ),
                        )
                    )
                )
            )

    def _step(self, job: JobRow, workers: list[WorkerRow]) -> None:
        if self.launcher.claimed(job.id):
            return  # being launched: looked at again once that is done
        if job.state is JobState.STARTING and any(w.handle is None for w in workers):
            if self.lifecycle.pulls.due(job):  # not while its image waits for its registry
                self.launcher.submit([job.id])  # launched beside the loop, not in it
            return
        if self.errors.exhausted(job.id):
            self._give_up(job, workers)
            return
        if self.errors.resting(job.id):
            return
        with self.errors.guard(job.id, f"advancing it ({job.state.value})", clears=True):
            try:
                self.lifecycle.advance(job, workers)
            except StaleWrite:
                self._dirty = True  # someone else moved the job; look again next pass

    def _give_up_on(self, job_id: int) -> None:
        with self.store.read() as session:
            job = session.get(JobRow, job_id)
        if job is not None:
            self._give_up(job)

    def _give_up(self, job: JobRow, workers: list[WorkerRow] | None = None) -> None:
        why = f"{self.errors.last(job.id)} (failed {GIVE_UP_AFTER} times in a row)"
        try:
            if workers is None:
                with self.store.read() as session:
                    workers = list(
                        session.scalars(
                            select(WorkerRow).where(
                                WorkerRow.job_id == job.id, WorkerRow.attempt == job.attempt
                            )
                        )
                    )
            self.lifecycle.give_up(job, workers, why)
        except Exception:
            log.exception("job %s: could not give up on it", job.id)
            return
        self.errors.forget(job.id)

    def _record_error(self, job_id: int, message: str, count: int) -> None:
        """Each failure of a job's work is an event of that job."""
        with self.store.write() as session:
            job = session.get(JobRow, job_id)
            if job is not None:
                left = GIVE_UP_AFTER - count
                record_event(
                    session,
                    job,
                    kind=EventKind.CONTROLLER_ERROR,
                    actor=ACTOR,
                    time=self.clock.now(),
                    reason=f"{message}; "
                    + (f"will try {left} more time(s)" if left > 0 else "giving up on the job"),
                )
