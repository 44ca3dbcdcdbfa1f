"""The reconcile loop: load -> decide -> apply, and keep every job's workers in step.

One pass (:meth:`Controller.tick`):

1. **Sync workers.** Ask the executor about workers that have not ended; record exits and
   losses on the worker rows and in the job's events.
2. **Advance jobs.** Each job that holds resources takes one step
   (:mod:`gpuyard.controller.lifecycle`): launch, settle, drain, suspend, expire.
3. **Schedule.** Load a snapshot, call the pure :func:`gpuyard.scheduler.decide`, apply its
   starts and suspensions with guarded writes, record waiting reasons
   (:mod:`gpuyard.controller.apply`).

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
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import and_, func, or_, select, tuple_, update

from gpuyard.clock import Clock
from gpuyard.controller.apply import Applier
from gpuyard.controller.forecaster import Forecaster
from gpuyard.controller.health import GIVE_UP_AFTER, JobErrors, LoopHealth, describe
from gpuyard.controller.inspection import INSPECT_EVERY, Inspector
from gpuyard.controller.launcher import Launcher
from gpuyard.controller.lifecycle import ACTOR, LaunchConfig, Lifecycle, describe_exit
from gpuyard.controller.sampler import UsageSampler
from gpuyard.controller.suspension import REQUEUE_ASKED
from gpuyard.errors import IllegalTransition, StaleWrite
from gpuyard.executors.base import Executor
from gpuyard.models import JobState, NodeState
from gpuyard.models.states import HOLDING
from gpuyard.models.usage import DEFAULT_INTERVAL
from gpuyard.models.worker import (
    ControlState,
    Handle,
    NodeInfo,
    WorkerKey,
    WorkerState,
    WorkerStatus,
)
from gpuyard.services.suspension import begin_suspension
from gpuyard.services.transitions import record_event
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, NodeRow, SignalRow, WorkerRow
from gpuyard.store.workers import set_worker_state

__all__ = ["Controller", "LaunchConfig"]

log = logging.getLogger("gpuyard.controller")

SCHEDULE_EVERY = 5.0
"""Seconds between scheduling passes when nothing asks for one."""
MAX_SCHEDULE_GAP = 1.0
TIME_LIMIT_ACTOR = "time-limit"
"""Who sends ``--signal=SIG@SECONDS`` before a job's time limit."""
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
    ) -> None:
        """``alert``: where alerts go besides the jobs' logs (the pool's webhook).
        ``inspect_every``: seconds between inspections of the nodes' health, run beside the
        loop (:mod:`gpuyard.controller.inspection`); 0 for none. ``usage_interval``: seconds
        between usage samples."""
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
        self._last_nodes = 0.0
        self._node_infos: list[NodeInfo] | None = None
        self._backoff = 0.0
        self._reported: set[tuple[int, str]] = set()
        """(worker id, problem) pairs already recorded as events."""
        self._devices: dict[str, Sequence[str]] | None = None
        self.health_state = LoopHealth(started_at=clock.now(), stall_after=stall_after)
        self._started = clock.monotonic()
        self.errors = JobErrors(
            clock=clock.monotonic,
            on_error=self._record_error,
            health=self.health_state,
            wall=clock.now,
        )
        self.lifecycle = Lifecycle(
            store,
            executor,
            clock=clock,
            control_url=control_url,
            launch_config=launch_config or LaunchConfig(),
            gpu_devices=self._gpu_devices,
            mark_dirty=self._mark_dirty,
            alert=alert,
            look_again=self._look_again,
        )
        self.forecaster = Forecaster(store, clock)
        self.inspector = Inspector(
            store, executor, clock, every=inspect_every, cordoned=self.notify
        )
        self.sampler = UsageSampler(store, executor, clock, interval=usage_interval)
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
        with self._lock:
            everything = self._look_at_all
            full = full or everything
            workers, jobs = self._touched_workers, self._touched_jobs
            self._touched_workers, self._touched_jobs = set(), set()
            self._look_at_all = False
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
            self._sync_control()
            limit_signals = self._signal_before_limit()
        if full or jobs or limit_signals:
            # A signal someone sent pokes its job (jobs); a full pass catches the rest.
            self._deliver_signals()
        if schedule:
            self._dirty = False
            started = self.clock.monotonic()
            self.applier.run()
            self.forecaster.changed()  # it forecasts again within a few seconds
            finished = self.clock.monotonic()
            self.health_state.scheduled(finished - started)
            self._last_schedule = started
            self._next_schedule = finished + min(MAX_SCHEDULE_GAP, 2 * (finished - started))
        if not self.launcher.running:
            self.launcher.launch_now()  # driven pass by pass (tests): launch within the pass
        self.errors.end_pass()
        ended_at = self.clock.monotonic()
        self.health_state.passed(ended_at, self.clock.now(), ended_at - began)

    # -- nodes ----------------------------------------------------------------------------

    def _refresh_nodes(self, began: float) -> None:
        """Read the nodes again when the executor's nodes come and go (its ``node_refresh``
        seconds, e.g. a Ray cluster's; 0 or absent: only at start), and record them when they
        changed: a node that joins is scheduled on at the next pass, one that leaves is
        ``gone`` and its workers are looked at now."""
        every = float(getattr(self.executor, "node_refresh", 0.0) or 0.0)
        if not every or began - self._last_nodes < every:
            return
        self._last_nodes = began
        try:
            infos = self.executor.nodes()
        except Exception as exc:  # the nodes stay as last recorded; the next look may do
            log.warning("cannot read the executor's nodes: %s", describe(exc))
            return
        if infos != self._node_infos:
            left = {n.name for n in self._node_infos or ()} - {n.name for n in infos}
            self.register_nodes(infos)
            if left:
                with self._lock:
                    self._look_at_all = True

    def register_nodes(self, nodes: Sequence[NodeInfo] | None = None) -> None:
        """Record the executor's nodes (``nodes``: as just read); nodes it no longer presents
        become ``gone``."""
        now = self.clock.now()
        listed = list(self.executor.nodes() if nodes is None else nodes)
        self._node_infos = listed
        self._last_nodes = self.clock.monotonic()
        infos = {n.name: n for n in listed}
        with self.store.write() as session:
            existing = {row.name: row for row in session.scalars(select(NodeRow))}
            for name, info in infos.items():
                row = existing.get(name)
                if row is None:
                    row = NodeRow(name=name)
                    session.add(row)
                    row.state = NodeState.READY
                elif row.state is NodeState.GONE:  # back, and cordoned if it was
                    row.state = NodeState.CORDONED if row.cordon_reason else NodeState.READY
                row.address = info.address
                row.executor = self.executor.name
                row.gpus = info.gpus
                row.gpu_model = info.gpu_model
                row.gpu_devices = list(info.gpu_devices)
                row.cpus = info.cpus
                row.memory = info.memory
                row.labels = dict(info.labels)
                row.updated_at = now
            for name, row in existing.items():
                if name not in infos and row.executor == self.executor.name:
                    row.state = NodeState.GONE
                    row.updated_at = now
        self._devices = None
        self._dirty = True

    def _gpu_devices(self) -> dict[str, Sequence[str]]:
        """Per node, what CUDA_VISIBLE_DEVICES names for each GPU (read once per node set)."""
        if self._devices is None:
            with self.store.read() as session:
                self._devices = {
                    name: tuple(str(d) for d in devices)
                    for name, devices in session.execute(select(NodeRow.name, NodeRow.gpu_devices))
                }
        return self._devices

    # -- 1. sync workers ------------------------------------------------------------------

    def _sync_workers(self, only: Collection[WorkerKey] | None) -> set[int]:
        """Record the workers that ended; return the ids of their jobs. ``only``: just these
        workers (None: every running worker)."""
        if only is not None and not only:
            return set()
        query = select(WorkerRow.id, WorkerRow.job_id, WorkerRow.handle).where(
            WorkerRow.state == WorkerState.RUNNING, WorkerRow.handle.is_not(None)
        )
        with self.store.read() as session:
            if only is None:
                rows = session.execute(query).all()
            else:
                rows = []
                keys = [(k.job_id, k.attempt, k.rank) for k in only]
                for chunk in range(0, len(keys), 300):  # bind-parameter limits
                    rows += session.execute(
                        query.where(
                            tuple_(WorkerRow.job_id, WorkerRow.attempt, WorkerRow.rank).in_(
                                keys[chunk : chunk + 300]
                            )
                        )
                    ).all()
        rows = [r for r in rows if not self.errors.resting(r[1])]
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
        with self.store.write() as session:
            for worker_id, st in ended:
                worker = session.get(WorkerRow, worker_id)
                if worker is None or worker.state is not WorkerState.RUNNING:
                    continue
                job = session.get(JobRow, worker.job_id)
                lost = st.state is WorkerState.LOST
                detail = describe_exit(worker, st, job)
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
                        kind="worker_lost" if lost else "worker_exited",
                        actor=ACTOR,
                        reason=detail,
                        node=worker.node,
                        time=now,
                    )
        self._dirty = True
        return jobs

    def _statuses(self, rows: Sequence[tuple[int, Handle]]) -> list[WorkerStatus | None]:
        """The executor's answer for each (job, handle); None where it could not answer. One
        call for all; if that raises, one call per job, so a handle that breaks the executor
        is that job's error and nobody else's."""
        try:
            return list(self.executor.status([handle for _, handle in rows]))
        except Exception:
            log.warning("worker status failed as a batch; asking job by job", exc_info=True)
        result: list[WorkerStatus | None] = [None] * len(rows)
        for job_id, indices in _by_job(rows).items():
            with self.errors.guard(job_id, "reading its workers' status"):
                answers = self.executor.status([rows[i][1] for i in indices])
                for i, answer in zip(indices, answers, strict=True):
                    result[i] = answer
        return result

    def _controls(self, rows: Sequence[tuple[int, Handle]]) -> list[ControlState | None]:
        """As :meth:`_statuses`, for what the workers' runtimes reported."""
        try:
            return list(self.executor.control([handle for _, handle in rows]))
        except Exception:
            log.warning("reading control files failed as a batch; job by job", exc_info=True)
        result: list[ControlState | None] = [None] * len(rows)
        for job_id, indices in _by_job(rows).items():
            with self.errors.guard(job_id, "reading its workers' control files"):
                answers = self.executor.control([rows[i][1] for i in indices])
                for i, answer in zip(indices, answers, strict=True):
                    result[i] = answer
        return result

    def _signal_before_limit(self) -> bool:
        """Slurm's ``--signal=[B:]SIG@SECONDS``: that long before a job's time limit, its steps
        (or batch shell) get the signal, once per attempt. Whether one is now due."""
        now = self.clock.now()
        with self.store.read() as session:
            rows = session.execute(
                select(JobRow.id, JobRow.spec).where(
                    JobRow.state == JobState.RUNNING,
                    JobRow.limit_signal.is_not(None),
                    JobRow.started_at + JobRow.max_runtime - JobRow.limit_signal <= now,
                )
            ).all()
        due: list[tuple[int, int, bool]] = []
        for job_id, spec in rows:
            wanted = ((spec or {}).get("slurm") or {}).get("signal")
            if isinstance(wanted, dict) and isinstance(wanted.get("signal"), int):
                due.append((job_id, wanted["signal"], not wanted.get("batch", False)))
        if not due:
            return False
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

    def _deliver_signals(self) -> None:
        """Deliver the signals people sent (``scancel --signal``) and the time limit's."""
        with self.store.read() as session:
            pending = session.execute(
                select(SignalRow.id, SignalRow.job_id, SignalRow.signal, SignalRow.steps)
                .where(SignalRow.delivered_at.is_(None))
                .order_by(SignalRow.id)
                .limit(1000)
            ).all()
            if not pending:
                return
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
                        actor="job",
                        why=REQUEUE_ASKED,
                        now=now,
                        notice=0.0,
                    )
                except (StaleWrite, IllegalTransition):
                    continue

    def _sync_control(self) -> None:
        """Record what running jobs' runtimes report: when they last saved a checkpoint, and
        whether they listen for notices (preemption picks the victims that lose least); and,
        once each, the control files that could not be read."""
        with self.store.read() as session:
            rows = session.execute(
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
        rows = [r for r in rows if not self.errors.resting(r[1])]
        if not rows:
            return
        known = {job_id: (last, listens) for _, job_id, _, last, listens in rows}
        seen: dict[int, tuple[float | None, bool]] = {}
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
                            kind="control_file",
                            actor=ACTOR,
                            time=now,
                            reason=f"ignored a control file of worker {worker_id}: {problem}",
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
                    kind="controller_error",
                    actor=ACTOR,
                    time=self.clock.now(),
                    reason=f"{message}; "
                    + (f"will try {left} more time(s)" if left > 0 else "giving up on the job"),
                )


def _by_job(rows: Iterable[tuple[int, Handle]]) -> dict[int, list[int]]:
    """Row indices grouped by job id."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, (job_id, _) in enumerate(rows):
        groups[job_id].append(i)
    return groups
