"""What happens to one job in a pass: launch it, settle it, drain it, or give up on it.

:class:`Lifecycle` holds the rules the controller applies to each job that holds resources,
one job at a time (the loop guards each call, so one job's failure stays that job's):

- *starting*: launch every worker (handles are written even if a later launch fails, so no
  launched worker is ever forgotten), as the owner's OS account when the pool runs jobs as
  their owners (``users.os_user``, :mod:`gpuyard.launch.accounts`); all launched -> running; a
  launch refused, or an account no job may run as -> failing;
- *running*: what its workers add up to (:mod:`gpuyard.controller.verdict`): succeed, fail,
  complete, stop sub-tasks; a worker that asked to be suspended suspends the job; past its
  max runtime -> expiring;
- *stopping / expiring / failing / completing*: SIGTERM once with the graceful period, SIGKILL
  stragglers the supervisor did not end, and end the job once every worker has exited;
- *suspending*: the notice protocol (:mod:`gpuyard.controller.suspension`);
- *halting*: drained as a stop is, then *held*; *held* and *restarting*: a job held for
  debugging (:mod:`gpuyard.controller.hold`);
- a job whose work keeps failing is given up on: its workers are killed and it fails with the
  error as its reason (:meth:`Lifecycle.give_up`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update

from gpuyard.clock import Clock
from gpuyard.controller.apply import launch_spec, worker_rows
from gpuyard.controller.catalogue import catalogue_mounts
from gpuyard.controller.dataprep import DataPrep, NodeFull, prepared_mounts, spec_on_node
from gpuyard.controller.hold import Hold
from gpuyard.controller.pulls import ImagePulls, PullWaiting
from gpuyard.controller.recovery import CheckProgress, FaultRecovery, is_check, log_tail
from gpuyard.controller.suspension import EXIT_SUSPENDED, Suspender, asked_to_suspend
from gpuyard.controller.verdict import Outcome, Verdict, WorkerFacts, settle
from gpuyard.diagnosis.signatures import Diagnosis, diagnose, scan
from gpuyard.errors import StaleWrite
from gpuyard.executors.base import Executor, LaunchError
from gpuyard.launch.accounts import AccountRefused, os_account
from gpuyard.launch.network import NetworkPreset
from gpuyard.launch.plan import JobContext, MpiInstall, plan_worker
from gpuyard.models import JobState, JobType, Slot
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.job import JobSpec, MpiImplementation
from gpuyard.models.states import DRAIN_TARGET, HOLD_TARGET, TRANSITIONS
from gpuyard.models.worker import (
    Handle,
    RunAs,
    WorkerState,
    WorkerStatus,
    check_worker_transition,
)
from gpuyard.quantities import format_duration
from gpuyard.services.suspension import begin_suspension
from gpuyard.services.transitions import record_event, transition
from gpuyard.store.engine import Store
from gpuyard.store.guarded import current
from gpuyard.store.tables import JobRow, UserRow, WorkerRow
from gpuyard.store.workers import launch_failed, record_launches, set_worker_state

__all__ = ["ACTOR", "ESCALATED", "KILL_BACKSTOP", "LaunchConfig", "Lifecycle", "describe_exit"]

log = logging.getLogger("gpuyard.controller")

DIAGNOSIS_TAIL = 32 * 1024
"""Bytes of each worker's log the failure diagnosis reads (the end, where the fault is)."""
DIAGNOSIS_WORKERS = 128
"""Workers of one job whose logs it reads at most."""

ACTOR = Actor.CONTROLLER
KILL_BACKSTOP = 10.0
"""Seconds past a worker's graceful period before the controller SIGKILLs it itself (the
supervisor normally does it at the end of the period)."""
ESCALATED = "killed with SIGKILL"
"""How a worker's exit detail says it outlived its graceful period."""


@dataclass(frozen=True)
class LaunchConfig:
    """Launch inputs every job shares."""

    mpi: dict[MpiImplementation, MpiInstall] = field(default_factory=dict)
    network: NetworkPreset = field(default_factory=NetworkPreset)
    run_as: RunAs = RunAs.POOL
    """Whose OS account runs the workers. The composition root sets OWNER from the setting
    when the pool can switch users (it runs as root); tests of the loop keep the pool's."""
    image_pull_timeout: float = 600.0
    """Seconds a job waits for its image's registry before it fails (docs/images.md#pulling)."""


class Lifecycle:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        *,
        clock: Clock,
        control_url: str,
        launch_config: LaunchConfig,
        gpu_devices: Callable[[], Mapping[str, Sequence[str]]],
        mark_dirty: Callable[[], None],
        alert: Callable[[dict[str, Any]], None] | None = None,
        look_again: Callable[[int], None] = lambda _job_id: None,
        data_copied: Callable[[int, float], None] = lambda _size, _seconds: None,
    ) -> None:
        """``look_again``: have the loop take the job's next step in its next pass, targeted
        or full (a job restarted after a fault, to be launched at once). ``data_copied``:
        told of each node's dataset copy made or used (:class:`DataPrep`)."""
        self.store = store
        self.executor = executor
        self.clock = clock
        self.control_url = control_url
        self.launch_config = launch_config
        self._gpu_devices = gpu_devices
        self._mark_dirty = mark_dirty
        self._backstop_kills: set[int] = set()
        """Workers this controller SIGKILLed itself (to record the event once)."""
        self.suspender = Suspender(store, executor, clock, self)
        self.pulls = ImagePulls(store, executor, clock, timeout=launch_config.image_pull_timeout)
        self.data = DataPrep(store, executor, clock, copied=data_copied)
        self.hold = Hold(
            store,
            executor,
            clock,
            self,
            context=self._context,
            restart=lambda job: self.recovery.restart(job, counted=False),
            kill_backstop=KILL_BACKSTOP,
        )
        self.recovery = FaultRecovery(
            store,
            executor,
            clock,
            self,
            look_again=look_again,
            new_workers=lambda row, slots, attempt, check: worker_rows(
                row.id, row.job_spec(), slots, attempt, check=check
            ),
            alert=alert,
            hold_failed=self.hold.hold_failed,
        )

    def advance(self, job: JobRow, workers: list[WorkerRow]) -> None:
        """One step of a job that holds resources, according to its state."""
        self._advance(job, workers)

    def _advance(self, job: JobRow, workers: list[WorkerRow]) -> None:
        state = JobState(job.state)
        if state is JobState.STARTING:
            self._launch(job, workers)
        elif state is JobState.RUNNING:
            if not self.recovery.watch(job, [w for w in workers if not is_check(w)]):
                self._settle_running(job, workers)
        elif state is JobState.SUSPENDING:
            self.suspender.advance(job, workers)
        elif state is JobState.RECOVERING:
            self.recovery.advance(job, workers)
        elif state is JobState.HELD:
            self.hold.advance(job, workers)
        elif state is JobState.RESTARTING:
            self.hold.restart(job, workers)
        else:
            self._drain(job, state, workers)

    def _launch(self, job: JobRow, workers: list[WorkerRow]) -> None:
        checks = [w for w in workers if is_check(w)]
        if checks and self.recovery.checks(job, checks) is not CheckProgress.PASSED:
            return  # the job's own workers start once every node passed its check
        placement = [Slot.model_validate(s) for s in job.placement or []]
        spec = launch_spec(job.job_spec(), len(placement))
        run_as, refused = None, ""
        try:
            run_as = self._account(job)
        except AccountRefused as exc:
            refused = str(exc)  # the job fails with it, as if its first worker had
        held: frozenset[str] = frozenset()
        if not refused:
            try:
                spec, held = catalogue_mounts(self.store, spec, job.owner)
            except LaunchError as exc:
                refused = str(exc)
        copies = {} if refused else self._before_workers(job, spec, workers)
        if copies is None:
            return
        ctx = self._context(job, placement, run_as)
        handles: dict[int, Handle] = {}
        failure: tuple[WorkerRow, str] | None = None
        try:
            for worker in workers:
                if worker.handle is not None:
                    continue
                if worker.state is WorkerState.LOST:
                    # Its launch failed in an earlier pass whose move of the job to failing
                    # was dropped as stale: the job fails now, and nothing is launched again.
                    failure = (worker, worker.detail or "its worker could not be launched")
                    break
                # Refused before it starts a process, not after, when its handle could not
                # be recorded.
                check_worker_transition(worker.id, worker.state, WorkerState.RUNNING)
                if refused:
                    failure = (worker, refused)
                    break
                base_env = self.executor.base_env(worker.node)
                on_node = spec_on_node(spec, copies.get(worker.node, {}))
                node_held = held | frozenset(copies.get(worker.node, {}).values())
                node_ctx = dataclasses.replace(ctx, held=node_held)
                launch = plan_worker(on_node, node_ctx, worker.rank, base_env=base_env)
                try:
                    handles[worker.id] = self.executor.launch(launch)
                except LaunchError as exc:
                    failure = (worker, str(exc))
                    break
        except BaseException:
            # Whatever went wrong, a launched worker must never be forgotten.
            self._record_handles(workers, handles)
            raise
        self._launched(job, workers, handles, failure)

    def _pull(self, job: JobRow, image: str, workers: list[WorkerRow]) -> None:
        """The job's image on each node of its workers still to launch (a node check runs
        on the node itself, outside any image, and needs none)."""
        nodes = [w.node for w in workers if w.handle is None and not is_check(w)]
        self.pulls.pull(job, image, nodes)

    def _before_workers(
        self, job: JobRow, spec: JobSpec, workers: list[WorkerRow]
    ) -> dict[str, dict[str, str]] | None:
        """The phases before the job's workers start: its image pulled on its nodes, then its
        prepared datasets copied there. Per node, its copies by mount; None when the job
        does not start now (it waits for its registry, failed, or is placed again)."""
        try:
            if spec.image is not None:
                self._pull(job, spec.image, workers)
            if prepared_mounts(spec):
                return self._prepare_data(job, spec, workers)
        except PullWaiting:
            return None  # tried again once the pulls say it is due
        except NodeFull as exc:
            self.recovery.place_elsewhere(job, exc.node, why=str(exc))
            return None
        except LaunchError as exc:
            self._launched(job, workers, {}, (_first_unlaunched(workers), str(exc)))
            return None
        return {}

    def _prepare_data(
        self, job: JobRow, spec: JobSpec, workers: list[WorkerRow]
    ) -> dict[str, dict[str, str]]:
        """The job's prepared datasets copied to each node of its workers still to launch
        (docs/datasets.md, "Data preparation"): per node, per mount, its copy."""
        nodes = [w.node for w in workers if w.handle is None and not is_check(w)]
        return self.data.prepare(job, spec, nodes)

    def _context(self, job: JobRow, placement: list[Slot], run_as: str | None) -> JobContext:
        """What the launch of a worker of the job's current attempt needs beyond its spec."""
        return JobContext(
            job_id=job.id,
            name=job.name,
            owner=job.owner,
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
            run_as=run_as,
            resume=job.resume,
            resume_step=job.resume_step,
        )

    def _account(self, job: JobRow) -> str | None:
        """The OS account the job's workers run as (None: the pool's own user)."""
        if self.launch_config.run_as is not RunAs.OWNER:
            return None
        with self.store.read() as session:
            mapped = session.scalar(select(UserRow.os_user).where(UserRow.name == job.owner))
        return os_account(job.owner, mapped)

    def _launched(
        self,
        job: JobRow,
        workers: list[WorkerRow],
        handles: dict[int, Handle],
        failure: tuple[WorkerRow, str] | None,
    ) -> None:
        """Record a launch: the handles of what started, and the job's move (running, or
        failing with the reason of the worker that could not start)."""
        now = self.clock.now()
        with self.store.write() as session:
            # Handles are recorded whatever happened to the job meanwhile (the next pass
            # drains the workers if the job was stopped).
            record_launches(session, workers, handles, now)
            if failure is not None and failure[0].state is not WorkerState.LOST:
                worker, message = failure
                launch_failed(session, worker, message, now)
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
                workers = [w for w in workers if not is_check(w)]
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
                self.recovery.running_again(session, row, now, nodes)
        self._mark_dirty()

    def _diagnose(self, workers: list[WorkerRow]) -> Diagnosis | None:
        """The likely root cause of a failure from the tail of each worker's log (at most
        :data:`DIAGNOSIS_TAIL` bytes of :data:`DIAGNOSIS_WORKERS` workers); the first worker
        to end counts as earliest. Never stops a failure from being recorded."""
        observations = []
        try:
            for worker in sorted(workers, key=lambda w: w.rank)[:DIAGNOSIS_WORKERS]:
                if worker.handle is None:
                    continue
                lines = log_tail(self.executor, worker.handle, DIAGNOSIS_TAIL)
                at = worker.finished_at if worker.finished_at is not None else float("inf")
                observations += scan(lines, rank=worker.rank, node=worker.node, at=at)
        except Exception:
            log.warning("could not read the logs of a failed job to diagnose it", exc_info=True)
            return None
        return diagnose(observations)

    def _record_handles(self, workers: list[WorkerRow], handles: dict[int, Handle]) -> None:
        if handles:
            with self.store.write() as session:
                record_launches(session, workers, handles, self.clock.now())

    def _settle_running(self, job: JobRow, workers: list[WorkerRow]) -> None:
        """What a running job's workers add up to (:func:`settle`), and its max runtime."""
        workers = [w for w in workers if not is_check(w)]  # all passed before it ran
        now = self.clock.now()
        if self._suspended_itself(job, workers, now):
            return
        verdict = settle([_facts(w) for w in workers], batch=job.job_spec().type is JobType.BATCH)
        if verdict.outcome is Outcome.FAIL:
            self._fail(job, workers, verdict, now)
        elif verdict.outcome is Outcome.SUCCEED:
            self._succeed(job, verdict, now)
        elif verdict.outcome is Outcome.COMPLETE:
            self._complete(job, workers, verdict, now)
        else:
            if verdict.terminate or verdict.notes:
                self._terminate(
                    job,
                    [w for w in workers if w.id in {f.id for f in verdict.terminate}],
                    notes=verdict.notes,
                )
            self._expire_if_due(job, workers, now)

    def _fail(self, job: JobRow, workers: list[WorkerRow], verdict: Verdict, now: float) -> None:
        """A worker failed: the job recovers, is held (``keep_failed``), or fails (draining
        its live workers first); the likely cause from the logs is recorded in each case."""
        failure = verdict.failure
        ended = all(w.state.is_ended() for w in workers)
        target = JobState.FAILED if ended else JobState.FAILING
        diagnosis = self._diagnose(workers)
        first = next((w for w in workers if failure and w.id == failure.id), None)
        if self.recovery.recover(
            job, workers, why=verdict.why, first=first, diagnosis=diagnosis
        ) or self.hold.hold_failed(
            job,
            workers,
            verdict.why,
            node=failure.node if failure else None,
            exit_code=failure.exit_code if failure else None,
        ):
            with self.store.write() as session:
                _diagnosis_event(session, job, diagnosis, now)
            return
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
            _diagnosis_event(session, row, diagnosis, now)
        if not ended:
            self._drain(row, target, workers)

    def _succeed(self, job: JobRow, verdict: Verdict, now: float) -> None:
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
        self._mark_dirty()

    def _complete(
        self, job: JobRow, workers: list[WorkerRow], verdict: Verdict, now: float
    ) -> None:
        """The workers that decide it succeeded; its helpers are told to exit."""
        with self.store.write() as session:
            row = self._fresh_or_stale(session, job)
            transition(session, row, JobState.COMPLETING, actor=ACTOR, why=verdict.why, time=now)
        self._drain(row, JobState.COMPLETING, workers)

    def _expire_if_due(self, job: JobRow, workers: list[WorkerRow], now: float) -> None:
        max_runtime = job.max_runtime
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
                actor=Actor.worker(asker.rank),
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
        grace = job.grace()
        signalled = []
        for w in workers:
            if w.handle is not None and w.terminate_sent_at is None:
                self.executor.terminate(w.handle, grace)
                signalled.append(w)
        with self.store.write() as session:
            for note in notes:
                record_event(session, job, kind=EventKind.TASK, actor=ACTOR, reason=note, time=now)
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
                kind=EventKind.SIGNAL,
                actor=ACTOR,
                node=w.node,
                time=now,
                reason=f"SIGTERM sent to worker {w.rank}; SIGKILL if it is still running "
                f"after the graceful period ({format_duration(grace)})",
            )

    def _drain(
        self,
        job: JobRow,
        state: JobState,
        workers: list[WorkerRow],
        *,
        grace: float | None = None,
    ) -> None:
        """Tell live workers to exit within ``grace`` seconds (default: the job's graceful
        period); SIGKILL stragglers; end the job when all have exited."""
        now = self.clock.now()
        spec_grace = job.grace()
        grace = spec_grace if grace is None else min(grace, spec_grace)
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
                    kind=EventKind.SIGNAL,
                    actor=ACTOR,
                    node=w.node,
                    time=now,
                    reason=f"SIGKILL sent to worker {w.rank}: its supervisor did not end it "
                    "after the graceful period",
                )
            for w in cancelled:
                set_worker_state(
                    session, w, WorkerState.CANCELLED, detail="never started", finished_at=now
                )
            ended = {w.id for w in cancelled} | {w.id for w in workers if w.state.is_ended()}
            # A suspension ends in the suspender; a hold's drain ends held, not ended.
            target = DRAIN_TARGET.get(state) or HOLD_TARGET.get(state)
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
                self._mark_dirty()

    # -- giving up ------------------------------------------------------------------------

    def give_up(self, job: JobRow, workers: list[WorkerRow], why: str) -> None:
        """End a job whose work keeps failing: kill every worker that may run, and fail the
        job with ``why``. Written to need as little of the job as possible (not its spec):
        whatever broke its normal path must not break this one."""
        now = self.clock.now()
        for w in workers:
            if w.handle is not None and not w.state.is_ended():
                with contextlib.suppress(Exception):  # best effort: it may be gone already
                    self.executor.kill(w.handle)
        reason = f"the controller gave up on this job: {why}"
        with self.store.write() as session:
            for w in workers:
                if not w.state.is_ended():
                    set_worker_state(
                        session,
                        w,
                        WorkerState.LOST if w.handle else WorkerState.CANCELLED,
                        detail="killed: the controller gave up on the job",
                        finished_at=now,
                    )
            row = session.get(JobRow, job.id)
            if row is None or row.state.is_terminal():
                return
            for target in _give_up_path(row.state):
                transition(session, row, target, actor=ACTOR, why=reason, time=now, reason=reason)
        self._mark_dirty()

    # -- helpers --------------------------------------------------------------------------

    def _fresh(self, session: Any, job: JobRow) -> JobRow | None:
        """The job's row if nobody changed it since ``job`` was read, else None."""
        row = current(session, job.id, job.version)
        if row is None:
            self._mark_dirty()
        return row

    def _fresh_or_stale(self, session: Any, job: JobRow) -> JobRow:
        row = self._fresh(session, job)
        if row is None:
            raise StaleWrite(f"job {job.id} changed since it was read")
        return row

    # -- JobActions: what hold, recovery and suspension ask of their lifecycle -------------
    # The protocol's public names for the lifecycle's own guard, drain and account.
    fresh = _fresh
    drain = _drain
    account = _account

    def mark_dirty(self) -> None:
        self._mark_dirty()

    def gpu_devices(self) -> Mapping[str, Sequence[str]]:
        return self._gpu_devices()


def _give_up_path(state: JobState) -> tuple[JobState, ...]:
    """The moves from ``state`` to its end when the controller gives up on the job: a draining
    job ends as its drain would have; any other fails, through ``failing`` if it must."""
    if state in DRAIN_TARGET:
        return (DRAIN_TARGET[state],)
    if JobState.FAILED in TRANSITIONS[state]:
        return (JobState.FAILED,)
    return (JobState.FAILING, JobState.FAILED)


def _diagnosis_event(session: Any, job: JobRow, diagnosis: Diagnosis | None, now: float) -> None:
    if diagnosis is not None and diagnosis.cause is not None:
        record_event(
            session,
            job,
            kind=EventKind.DIAGNOSIS,
            actor=ACTOR,
            reason=f"{diagnosis.summary()} [suspect: {diagnosis.suspect.value}]",
            time=now,
            node=diagnosis.cause.node or None,
        )


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


def describe_exit(
    worker: WorkerRow, status: WorkerStatus, job: JobRow | None, *, suspended: bool = False
) -> str:
    """How a worker ended, in words, from what its executor reported; ``suspended``: its
    runtime wrote ``suspended.json`` (a launcher may have turned its 75 into its own code)."""
    who = f"worker {worker.rank} on {worker.node}"
    code = status.exit_code
    if status.state is WorkerState.LOST:
        return f"{who} was lost: {status.message}" if status.message else f"{who} was lost"
    if status.message:
        return f"{who} could not start: {status.message} (exit code {code})"
    if status.cause:
        return f"{who} ended: {status.cause} (exit code {code})"
    if status.escalated:
        grace = job.grace() if job else 0.0
        return (
            f"{who} did not exit within the graceful period ({format_duration(grace)}) after "
            f"SIGTERM and was {ESCALATED} (exit code {code})"
        )
    if status.signal:
        return f"{who} was ended by {status.signal} (exit code {code})"
    return _plain_exit(who, code, suspended)


def _plain_exit(who: str, code: int | None, suspended: bool) -> str:
    """A worker that exited by itself: with the suspended code (75), or with its launcher's
    failing code after its runtime wrote ``suspended.json``, it was suspended, not failed."""
    if code == EXIT_SUSPENDED:
        return f"{who} was suspended: it checkpointed and exited to be requeued (exit code 75)"
    if suspended and code not in (0, None):
        return (
            f"{who} was suspended: it checkpointed and exited to be requeued (its launcher "
            f"exited with code {code} for the rank's 75)"
        )
    return f"{who} exited with code {code}"


def _first_unlaunched(workers: list[WorkerRow]) -> WorkerRow:
    """The worker a job's failure to start is recorded against."""
    return next((w for w in workers if w.handle is None and not is_check(w)), workers[0])
