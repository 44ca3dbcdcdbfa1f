"""The reconcile loop: load -> decide -> apply, and keep every job's workers in step.

One pass (:meth:`Controller.tick`):

1. **Sync workers.** Ask the executor about every worker that has not ended; record exits and
   losses on the worker rows and in the job's events.
2. **Advance jobs.** Launch the workers of starting jobs; settle running jobs whose workers
   ended (succeeded / failing / asked to be suspended); expire jobs past their max runtime;
   tell the workers of draining jobs (stopping / expiring / failing) to exit, SIGKILL those
   that outlive their graceful period, and end the job once all have exited; carry suspending
   jobs through the notice protocol (:mod:`gpuyard.controller.suspension`).
3. **Schedule.** Load a snapshot, call the pure :func:`gpuyard.scheduler.decide`, apply its
   starts and suspensions with guarded writes, record waiting reasons
   (:mod:`gpuyard.controller.apply`).

No transaction is open across executor I/O: every pass reads, closes the session, talks to
the executor, then writes in a short transaction whose UPDATEs are guarded by id + version.
A decision made on a stale read changes nothing and is retried on the next pass.

Adoption after a restart needs no special path: worker handles live in the store, the
executor answers for them from files its supervisors keep, and ``launch`` of a worker that
already exists returns it instead of starting a second copy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update

from gpuyard.clock import Clock
from gpuyard.controller.apply import Applier, launch_spec
from gpuyard.controller.suspension import Suspender, asked_to_suspend
from gpuyard.controller.verdict import Outcome, WorkerFacts, settle
from gpuyard.errors import StaleWrite
from gpuyard.executors.base import Executor, LaunchError
from gpuyard.launch.network import NetworkPreset
from gpuyard.launch.plan import JobContext, MpiInstall, plan_worker
from gpuyard.models import JobSpec, JobState, JobType, NodeState, Slot
from gpuyard.models.job import MpiImplementation
from gpuyard.models.states import DRAIN_TARGET, HOLDING
from gpuyard.models.worker import WorkerKey, WorkerState
from gpuyard.quantities import format_duration
from gpuyard.services.suspension import begin_suspension
from gpuyard.services.transitions import record_event, transition
from gpuyard.store.engine import Store
from gpuyard.store.guarded import current
from gpuyard.store.tables import JobRow, NodeRow, WorkerRow

__all__ = ["Controller", "LaunchConfig"]

log = logging.getLogger(__name__)

ACTOR = "controller"
KILL_BACKSTOP = 10.0
"""Seconds past a worker's graceful period before the controller SIGKILLs it itself (the
supervisor normally does it at the end of the period)."""
ESCALATED = "killed with SIGKILL"
"""How a worker's exit detail says it outlived its graceful period."""
SCHEDULE_EVERY = 5.0
"""Seconds between scheduling passes when nothing asks for one."""
MAX_SCHEDULE_GAP = 1.0
CONTROL_EVERY = 5.0
"""Seconds between reads of running workers' checkpoint reports (for choosing victims)."""


@dataclass(frozen=True)
class LaunchConfig:
    """Pool-wide inputs of every launch plan."""

    mpi: dict[MpiImplementation, MpiInstall] = field(default_factory=dict)
    network: NetworkPreset = field(default_factory=NetworkPreset)


@dataclass
class _Health:
    started_at: float = field(default_factory=time.time)
    last_tick: float | None = None
    ticks: int = 0
    errors: int = 0
    last_error: str = ""


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
    ) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.interval = interval
        self.control_url = control_url
        self.launch_config = launch_config or LaunchConfig()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._dirty = True
        self._last_schedule = 0.0
        self._next_schedule = 0.0
        self._backstop_kills: set[int] = set()
        """Workers this controller SIGKILLed itself (to record the event once)."""
        self._last_control_sync = 0.0
        self.suspender = Suspender(store, executor, clock, self._fresh, self._drain)
        self.applier = Applier(store, clock, launch=self._launch, mark_dirty=self._mark_dirty)
        self._thread: threading.Thread | None = None
        self._health = _Health()
        self._last_error_log = 0.0

    # -- running --------------------------------------------------------------------------

    def _mark_dirty(self) -> None:
        self._dirty = True

    def wake(self, _worker: WorkerKey | None = None) -> None:
        """Something changed (a submission, a stop, a worker exit): run a pass soon."""
        self._dirty = True
        self._wake.set()

    def start(self) -> None:
        self.register_nodes()
        self.executor.set_wakeup(self.wake)
        self._thread = threading.Thread(target=self._run, name="gpuyard-controller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop. Workers keep running; the next controller adopts them."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def health(self) -> dict[str, Any]:
        h = self._health
        return {
            "alive": self._thread is not None and self._thread.is_alive(),
            "last_tick": h.last_tick,
            "ticks": h.ticks,
            "errors": h.errors,
            "last_error": h.last_error,
        }

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            now = self.clock.monotonic()
            due = (self._dirty and now >= self._next_schedule) or (
                now - self._last_schedule >= SCHEDULE_EVERY
            )
            try:
                self.tick(schedule=due)
            except Exception as exc:  # the loop must outlive any one bad pass
                self._health.errors += 1
                message = f"{type(exc).__name__}: {exc}"
                # The same failure repeats every pass; log its traceback once a minute.
                if message != self._health.last_error or now - self._last_error_log > 60:
                    log.exception("reconcile pass failed")
                    self._last_error_log = now
                self._health.last_error = message
            wait = self.interval
            if self._dirty:
                wait = max(0.0, min(wait, self._next_schedule - self.clock.monotonic()))
            self._wake.wait(wait)

    def tick(self, *, schedule: bool = True) -> None:
        """One reconcile pass. The loop skips scheduling while a burst of wake-ups (say, many
        submissions) arrives faster than passes finish: a scheduling pass costs in proportion
        to the queue, so passes are spaced at least twice their own duration apart."""
        self._sync_workers()
        self._advance_jobs()
        if self.clock.monotonic() - self._last_control_sync >= CONTROL_EVERY:
            self._last_control_sync = self.clock.monotonic()
            self._sync_control()
        if schedule:
            self._dirty = False
            began = self.clock.monotonic()
            self.applier.run()
            finished = self.clock.monotonic()
            self._last_schedule = began
            self._next_schedule = finished + min(MAX_SCHEDULE_GAP, 2 * (finished - began))
        self._health.last_tick = self.clock.now()
        self._health.ticks += 1

    # -- nodes ----------------------------------------------------------------------------

    def register_nodes(self) -> None:
        """Record the executor's nodes; nodes it no longer presents become ``gone``."""
        now = self.clock.now()
        infos = {n.name: n for n in self.executor.nodes()}
        with self.store.write() as session:
            existing = {row.name: row for row in session.scalars(select(NodeRow))}
            for name, info in infos.items():
                row = existing.get(name)
                if row is None:
                    row = NodeRow(name=name)
                    session.add(row)
                    row.state = NodeState.READY
                elif row.state is NodeState.GONE:
                    row.state = NodeState.READY
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
        self._dirty = True

    # -- 1. sync workers ------------------------------------------------------------------

    def _sync_workers(self) -> None:
        with self.store.read() as session:
            rows = session.execute(
                select(WorkerRow.id, WorkerRow.handle).where(
                    WorkerRow.state == WorkerState.RUNNING, WorkerRow.handle.is_not(None)
                )
            ).all()
        if not rows:
            return
        statuses = self.executor.status([handle for _, handle in rows])
        ended = [
            (worker_id, st)
            for (worker_id, _), st in zip(rows, statuses, strict=True)
            if st.state is not WorkerState.RUNNING
        ]
        if not ended:
            return
        now = self.clock.now()
        with self.store.write() as session:
            for worker_id, st in ended:
                worker = session.get(WorkerRow, worker_id)
                if worker is None or worker.state != WorkerState.RUNNING:
                    continue
                job = session.get(JobRow, worker.job_id)
                lost = st.state is WorkerState.LOST
                worker.state = WorkerState.LOST if lost else WorkerState.EXITED
                worker.exit_code = st.exit_code
                worker.finished_at = st.finished_at or now
                worker.detail = _describe_exit(
                    worker, st.exit_code, st.signal, st.escalated, st.message, lost, job
                )
                if job is not None:
                    record_event(
                        session,
                        job,
                        kind="worker_lost" if lost else "worker_exited",
                        actor=ACTOR,
                        reason=worker.detail,
                        node=worker.node,
                        time=now,
                    )
        self._dirty = True

    def _sync_control(self) -> None:
        """Record what running jobs' runtimes report: when they last saved a checkpoint, and
        whether they listen for notices. Preemption picks the victims that lose least."""
        with self.store.read() as session:
            rows = session.execute(
                select(
                    WorkerRow.job_id, WorkerRow.handle, JobRow.last_checkpoint_at, JobRow.listens
                )
                .join(JobRow, JobRow.id == WorkerRow.job_id)
                .where(
                    JobRow.state == JobState.RUNNING,
                    WorkerRow.state == WorkerState.RUNNING,
                    WorkerRow.attempt == JobRow.attempt,
                    WorkerRow.handle.is_not(None),
                )
            ).all()
        if not rows:
            return
        known = {job_id: (last, listens) for job_id, _, last, listens in rows}
        seen: dict[int, tuple[float | None, bool]] = {}
        states = self.executor.control([h for _, h, _, _ in rows])
        for (job_id, _, _, _), state in zip(rows, states, strict=True):
            last, listens = seen.get(job_id, known[job_id])
            at = state.checkpoint_at
            if at is not None and (last is None or at > last):
                last = at
            seen[job_id] = (last, listens or state.listening)
        changed = {j: v for j, v in seen.items() if v != known[j]}
        if changed:
            with self.store.write() as session:
                for job_id, (last, listens) in changed.items():
                    session.execute(
                        update(JobRow)
                        .where(JobRow.id == job_id)
                        .values(last_checkpoint_at=last, listens=listens)
                    )

    # -- 2. advance jobs ------------------------------------------------------------------

    def _advance_jobs(self) -> None:
        with self.store.read() as session:
            jobs = session.scalars(
                select(JobRow).where(JobRow.state.in_(HOLDING)).order_by(JobRow.id)
            ).all()
            workers: dict[int, list[WorkerRow]] = {job.id: [] for job in jobs}
            attempts = {job.id: job.attempt for job in jobs}
            if jobs:
                for w in session.scalars(
                    select(WorkerRow)
                    .where(WorkerRow.job_id.in_(list(workers)))
                    .order_by(WorkerRow.rank)
                ):
                    if w.attempt == attempts[w.job_id]:
                        workers[w.job_id].append(w)
        for job in jobs:
            try:
                self._advance(job, workers[job.id])
            except StaleWrite:
                self._dirty = True  # someone else moved the job; look again next pass

    def _advance(self, job: JobRow, workers: list[WorkerRow]) -> None:
        state = JobState(job.state)
        if state is JobState.STARTING:
            self._launch(job, workers)
        elif state is JobState.RUNNING:
            self._settle_running(job, workers)
        elif state is JobState.SUSPENDING:
            self.suspender.advance(job, workers)
        else:
            self._drain(job, state, workers)

    def _launch(self, job: JobRow, workers: list[WorkerRow]) -> None:
        placement = [Slot.model_validate(s) for s in job.placement or []]
        spec = launch_spec(JobSpec.model_validate(job.spec), len(placement))
        ctx = JobContext(
            job_id=job.id,
            name=job.name,
            attempt=job.attempt,
            placement=placement,
            job_dir=self.executor.job_dir(job.id),
            control_url=self.control_url,
            gpu_devices=self._gpu_devices(),
            token=job.token or "",
            tools=self.executor.tools(),
            mpi=self.launch_config.mpi,
            network=self.launch_config.network,
            mpi_interface=self.executor.interface,
        )
        handles: dict[int, dict[str, Any]] = {}
        failure: tuple[WorkerRow, str] | None = None
        for worker in workers:
            if worker.handle is not None:
                continue
            base_env = self.executor.base_env(worker.node)
            launch = plan_worker(spec, ctx, worker.rank, base_env=base_env)
            try:
                handles[worker.id] = self.executor.launch(launch)
            except LaunchError as exc:
                failure = (worker, str(exc))
                break
        now = self.clock.now()
        with self.store.write() as session:
            # Handles are recorded whatever happened to the job meanwhile: a launched worker
            # must never be forgotten (the next pass drains it if the job was stopped).
            for worker_id, handle in handles.items():
                session.execute(
                    update(WorkerRow)
                    .where(WorkerRow.id == worker_id)
                    .values(handle=handle, state=WorkerState.RUNNING, started_at=now)
                )
            if failure is not None:
                worker, message = failure
                session.execute(
                    update(WorkerRow)
                    .where(WorkerRow.id == worker.id)
                    .values(state=WorkerState.LOST, detail=message, finished_at=now)
                )
            row = self._fresh(session, job)
            if row is None:
                pass
            elif failure is not None:
                worker, message = failure
                transition(
                    session,
                    row,
                    JobState.FAILING,
                    actor=ACTOR,
                    why=message,
                    time=now,
                    node=worker.node,
                    reason=message,
                )
            elif all(w.handle is not None or w.id in handles for w in workers):
                nodes = ", ".join(dict.fromkeys(w.node for w in workers))
                transition(
                    session,
                    row,
                    JobState.RUNNING,
                    actor=ACTOR,
                    why=f"{len(workers)} worker(s) launched on {nodes}",
                    time=now,
                    started_at=now,
                )
        self._dirty = True

    def _settle_running(self, job: JobRow, workers: list[WorkerRow]) -> None:
        now = self.clock.now()
        if self._suspended_itself(job, workers, now):
            return
        verdict = settle(
            [_facts(w) for w in workers], batch=job.spec.get("type") == JobType.BATCH.value
        )
        if verdict.outcome is Outcome.FAIL:
            failure = verdict.failure
            ended = all(w.state.is_ended() for w in workers)
            target = JobState.FAILED if ended else JobState.FAILING
            with self.store.write() as session:
                row = self._fresh_or_stale(session, job)
                transition(
                    session,
                    row,
                    target,
                    actor=ACTOR,
                    why=verdict.why,
                    time=now,
                    node=failure.node if failure else None,
                    reason=verdict.why,
                    exit_code=failure.exit_code if failure else None,
                )
            if not ended:
                self._drain(row, target, workers)
            return
        if verdict.outcome is Outcome.SUCCEED:
            with self.store.write() as session:
                row = self._fresh_or_stale(session, job)
                transition(
                    session,
                    row,
                    JobState.SUCCEEDED,
                    actor=ACTOR,
                    why=verdict.why,
                    time=now,
                    exit_code=0,
                    reason=None,
                )
            self._dirty = True
            return
        if verdict.outcome is Outcome.COMPLETE:
            with self.store.write() as session:
                row = self._fresh_or_stale(session, job)
                transition(
                    session, row, JobState.COMPLETING, actor=ACTOR, why=verdict.why, time=now
                )
            self._drain(row, JobState.COMPLETING, workers)
            return
        if verdict.terminate or verdict.notes:
            self._terminate(
                job,
                [w for w in workers if w.id in {f.id for f in verdict.terminate}],
                notes=verdict.notes,
            )
        max_runtime = job.spec.get("max_runtime")
        if max_runtime and job.started_at is not None and now >= job.started_at + max_runtime:
            why = f"ran longer than its max runtime ({format_duration(max_runtime)})"
            with self.store.write() as session:
                row = self._fresh_or_stale(session, job)
                transition(
                    session, row, JobState.EXPIRING, actor=ACTOR, why=why, time=now, reason=why
                )
            self._drain(row, JobState.EXPIRING, workers)

    def _suspended_itself(self, job: JobRow, workers: list[WorkerRow], now: float) -> bool:
        """A worker that exits asking to be suspended (``gpuyard.runtime.suspend()``) suspends
        the whole job: the others get the notice, and the job is requeued."""
        exited = [w for w in workers if w.state == WorkerState.EXITED and w.exit_code != 0]
        if not exited:
            return False
        asker = asked_to_suspend(exited, self.executor.control([w.handle or {} for w in exited]))
        if asker is None:
            return False
        with self.store.write() as session:
            row = self._fresh_or_stale(session, job)
            begin_suspension(
                session,
                row,
                actor=f"worker:{asker.rank}",
                why=f"worker {asker.rank} asked to be suspended",
                now=now,
            )
        self.suspender.advance(row, workers)
        return True

    def _terminate(
        self, job: JobRow, workers: list[WorkerRow], *, notes: tuple[str, ...] = ()
    ) -> None:
        """Tell some workers of a job that goes on to exit (a failed sub-task, idle helpers)."""
        now = self.clock.now()
        grace = float(job.spec.get("graceful_shutdown", 30.0))
        signalled = []
        for w in workers:
            if w.handle is not None and w.terminate_sent_at is None:
                self.executor.terminate(w.handle, grace)
                signalled.append(w)
        with self.store.write() as session:
            for note in notes:
                record_event(session, job, kind="task", actor=ACTOR, reason=note, time=now)
            self._record_signals(session, job, signalled, grace, now)

    def _record_signals(
        self, session: Any, job: JobRow, workers: list[WorkerRow], grace: float, now: float
    ) -> None:
        for w in workers:
            session.execute(
                update(WorkerRow).where(WorkerRow.id == w.id).values(terminate_sent_at=now)
            )
            record_event(
                session,
                job,
                kind="signal",
                actor=ACTOR,
                node=w.node,
                time=now,
                reason=f"SIGTERM sent to worker {w.rank}; SIGKILL if it is still running "
                f"after the graceful period ({format_duration(grace)})",
            )

    def _drain(self, job: JobRow, state: JobState, workers: list[WorkerRow]) -> None:
        """Tell live workers to exit; SIGKILL stragglers; end the job when all have exited."""
        now = self.clock.now()
        grace = float(job.spec.get("graceful_shutdown", 30.0))
        signalled: list[WorkerRow] = []
        killed: list[WorkerRow] = []
        for w in workers:
            if w.state != WorkerState.RUNNING or w.handle is None:
                continue
            if w.terminate_sent_at is None:
                self.executor.terminate(w.handle, grace)
                signalled.append(w)
            elif now > w.terminate_sent_at + grace + KILL_BACKSTOP:
                self.executor.kill(w.handle)
                if w.id not in self._backstop_kills:
                    self._backstop_kills.add(w.id)
                    killed.append(w)
        cancelled = [w for w in workers if w.state == WorkerState.PENDING and w.handle is None]
        if not (signalled or killed or cancelled) and not all(w.state.is_ended() for w in workers):
            return
        with self.store.write() as session:
            # Worker bookkeeping is recorded even if the job changed meanwhile; only the
            # job's own transition is guarded.
            self._record_signals(session, job, signalled, grace, now)
            for w in killed:
                record_event(
                    session,
                    job,
                    kind="signal",
                    actor=ACTOR,
                    node=w.node,
                    time=now,
                    reason=f"SIGKILL sent to worker {w.rank}: its supervisor did not end it "
                    "after the graceful period",
                )
            for w in cancelled:
                session.execute(
                    update(WorkerRow)
                    .where(WorkerRow.id == w.id)
                    .values(state=WorkerState.CANCELLED, detail="never started", finished_at=now)
                )
            ended = {w.id for w in cancelled} | {w.id for w in workers if w.state.is_ended()}
            target = DRAIN_TARGET.get(state)  # a suspension ends in the suspender
            row = self._fresh(session, job) if target is not None else None
            if row is not None and target is not None and len(ended) == len(workers):
                escalated = [w for w in workers if w.detail and ESCALATED in w.detail]
                why = f"every worker has exited; {state.value} -> {target.value}"
                if escalated:
                    ranks = ", ".join(str(w.rank) for w in escalated)
                    why += f" (worker {ranks} SIGKILLed after the graceful period)"
                done: dict[str, Any] = (
                    {"exit_code": 0, "reason": None} if (target is JobState.SUCCEEDED) else {}
                )
                transition(session, row, target, actor=ACTOR, why=why, time=now, **done)
                self._dirty = True

    # -- helpers --------------------------------------------------------------------------

    def _fresh(self, session: Any, job: JobRow) -> JobRow | None:
        """The job's row if nobody changed it since ``job`` was read, else None."""
        row = current(session, job.id, job.version)
        if row is None:
            self._dirty = True
        return row

    def _fresh_or_stale(self, session: Any, job: JobRow) -> JobRow:
        row = self._fresh(session, job)
        if row is None:
            raise StaleWrite(f"job {job.id} changed since it was read")
        return row

    def _gpu_devices(self) -> dict[str, Sequence[str]]:
        with self.store.read() as session:
            return {
                name: tuple(str(d) for d in devices)
                for name, devices in session.execute(select(NodeRow.name, NodeRow.gpu_devices))
            }


def _facts(w: WorkerRow) -> WorkerFacts:
    return WorkerFacts(
        id=w.id,
        rank=w.rank,
        task=w.task,
        primary=w.primary,
        state=w.state,
        exit_code=w.exit_code,
        told_to_exit=w.terminate_sent_at is not None,
        detail=w.detail or "",
        node=w.node,
    )


def _describe_exit(
    worker: WorkerRow,
    code: int | None,
    signal_name: str | None,
    escalated: bool,
    message: str,
    lost: bool,
    job: JobRow | None,
) -> str:
    who = f"worker {worker.rank} on {worker.node}"
    if lost:
        return f"{who} was lost: {message}" if message else f"{who} was lost"
    if message:
        return f"{who} could not start: {message} (exit code {code})"
    if escalated:
        grace = float(job.spec.get("graceful_shutdown", 30.0)) if job else 0.0
        return (
            f"{who} did not exit within the graceful period ({format_duration(grace)}) after "
            f"SIGTERM and was {ESCALATED} (exit code {code})"
        )
    if signal_name:
        return f"{who} was ended by {signal_name} (exit code {code})"
    return f"{who} exited with code {code}"
