"""Fault tolerance in the controller: node checks, restarts after faults, hang detection.

The loop of docs/fault-tolerance.md, one pass at a time:

- **checks** (``starting``): a job whose attempt has check workers (its spec asks for a
  pre-flight check, or a fault pointed at its nodes) launches them first; once all passed, its
  own workers. A node a check blames is cordoned; the job is placed again without it
  (``suspended``), or fails with the check's evidence once its tries are spent.
- **faults** (``running``): a failed job whose fault tolerance says so (:mod:`gpuyard.diagnosis.
  recovery`) goes to ``recovering``: its workers are told to exit, then it restarts as the next
  attempt on the same nodes, re-checked first, or back in the queue if one of them is gone or
  cordoned. Resume or restart from scratch is the job's choice (``GPUYARD_RESUME``).
- **hangs** (``running``): no progress reported and no log written by any worker for the job's
  ``hang_timeout``: a fault like any other, except that its workers are killed at once (a hung
  worker cannot use a graceful period; waiting it out only delays the restart). Until an
  attempt first reports progress it is starting (imports, rendezvous, loading a checkpoint:
  silent, and far longer than a step), and only silence of :data:`HANG_START` or more, if that
  is longer, counts as a hang.
- **slowness** (``running``): the step rate (or hardware ratio) over the last window below a
  share of the job's own usual pace (:mod:`gpuyard.diagnosis.performance`): an alert, or a
  restart after a check of its nodes, per ``fault_tolerance.performance.action``.

Every fault is an entry of the job's fault-tolerance log (``job_faults``), with its evidence,
the action taken, and, once known, the outcome.
"""

from __future__ import annotations

import logging
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

from sqlalchemy import select, update

from gpuyard.clock import Clock
from gpuyard.controller.job_actions import JobActions
from gpuyard.diagnosis.checks import check_failures, inconclusive
from gpuyard.diagnosis.performance import Sample, Slowness, judge
from gpuyard.diagnosis.recovery import EXIT_NO_RESTART, Decision, FailureFacts, decide_recovery
from gpuyard.diagnosis.signatures import Diagnosis, Suspect
from gpuyard.executors.base import Executor, LaunchError
from gpuyard.launch.check import CHECK_BURN, CHECK_TIMEOUT, check_launches
from gpuyard.models import JobState, NodeState, Slot
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.faults import FaultTolerance, Recovery, SlowAction
from gpuyard.models.worker import ControlState, Handle, WorkerRole, WorkerState
from gpuyard.quantities import format_duration
from gpuyard.scheduler.snapshot import DEFAULT_POOL
from gpuyard.services.nodes import cordon_node
from gpuyard.services.transitions import record_event, transition
from gpuyard.store.engine import Store
from gpuyard.store.tables import FaultRow, JobRow, NodeRow, PoolRow, WorkerRow
from gpuyard.store.workers import launch_failed, record_launches

__all__ = ["CheckProgress", "FaultRecovery", "check_verdict", "log_tail"]

log = logging.getLogger("gpuyard.controller")

ACTOR = Actor.CONTROLLER
CHECK_DEADLINE = 2 * CHECK_TIMEOUT + 10 * CHECK_BURN + 30.0
"""Seconds a check worker may run before it is killed and its node blamed for hanging."""
CHECK_LOG_TAIL = 16 * 1024
WATCH_EVERY = 1.0
HANG_START = 60.0
"""Seconds of silence that make a hang before an attempt first reports progress, when its
``hang_timeout`` is shorter. A start writes nothing for as long as the job takes to import,
meet its peers and load its checkpoint: judged by a ``hang_timeout`` meant for steps, a healthy
job on a busy node was taken for hung and restarted over and over until its budget was spent."""
"""Seconds between two looks at a watched job's progress (at most)."""
SAVE_ALLOWANCE = 4.0
"""How many hang timeouts a job may be quiet while it saves a checkpoint."""
MAX_SAMPLES = 20_000
"""Progress samples kept per watched job (about 5 hours at one a second)."""


class CheckProgress(Enum):
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"


def log_tail(executor: Executor, handle: Handle, limit: int) -> list[str]:
    """The last ``limit`` bytes of a worker's log, as whole lines."""
    _, size = executor.read_log(handle, 0, 1)
    start = max(0, size - limit)
    data, _ = executor.read_log(handle, start, limit)
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if start else lines  # the first may be cut


def fault_tolerance(job: JobRow) -> FaultTolerance | None:
    spec = job.loaded_spec()
    return spec.fault_tolerance if spec is not None else None


class FaultRecovery:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        clock: Clock,
        actions: JobActions,
        *,
        look_again: Callable[[int], None],
        new_workers: Callable[[JobRow, list[Slot], int, bool], list[WorkerRow]],
        alert: Callable[[dict[str, Any]], None] | None = None,
        hold_failed: Callable[[JobRow, list[WorkerRow], str], bool] = lambda *_: False,
    ) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.actions = actions
        self._look_again = look_again
        self._new_workers = new_workers
        """The worker rows of an attempt on these slots (with check workers when asked)."""
        self._hold_failed = hold_failed
        """Hold a job that fails for good instead of failing it, if it asks to be kept
        (``keep_failed``); whether it did."""
        self._activity: dict[int, tuple[tuple[int, ...], float, float]] = {}
        """Watched jobs: (log sizes, progress time, when either last changed)."""
        self._looked: dict[int, float] = {}
        self._samples: dict[int, tuple[int, deque[Sample]]] = {}
        """Watched jobs' progress in their current attempt, for performance detection."""
        self._alerted: set[tuple[int, int]] = set()
        """(job, attempt) already found slow: one alert per attempt."""
        self._alert = alert or (lambda _payload: None)
        """Where an alert goes besides the job's log (the pool's webhook)."""

    # -- checks ---------------------------------------------------------------------------

    def checks(self, job: JobRow, checks: list[WorkerRow]) -> CheckProgress:
        """Launch the job's check workers, wait for them, act on their verdict."""
        now = self.clock.now()
        unlaunched = [w for w in checks if w.handle is None and w.state is WorkerState.PENDING]
        if unlaunched:
            self._launch_checks(job, checks)
            return CheckProgress.RUNNING
        running = [w for w in checks if w.state is WorkerState.RUNNING]
        if running:
            for w in running:
                if w.handle is not None and w.started_at and now > w.started_at + CHECK_DEADLINE:
                    self.executor.kill(w.handle)
            return CheckProgress.RUNNING
        if all(w.state is WorkerState.EXITED and w.exit_code == 0 for w in checks):
            return CheckProgress.PASSED
        self._check_failed(job, checks, now)
        return CheckProgress.FAILED

    def _launch_checks(self, job: JobRow, checks: list[WorkerRow]) -> None:
        placement = [Slot.model_validate(s) for s in job.placement or []]
        nodes = {w.node for w in checks}
        launches = check_launches(
            job_id=job.id,
            attempt=job.attempt,
            placement=placement,
            tools=self.executor.tools(),
            base_env={n: self.executor.base_env(n) for n in nodes},
            gpu_devices=self.actions.gpu_devices(),
            job_dir=self.executor.job_dir(job.id),
            run_as=self.actions.account(job),
            floor=self._floor(placement[0].node) if placement else None,
        )
        by_rank = {launch.key.rank: launch for launch in launches}
        handles: dict[int, Handle] = {}
        failed: list[tuple[WorkerRow, str]] = []
        for w in checks:
            launch = by_rank.get(w.rank)
            if launch is None:
                failed.append((w, "no check planned for this worker"))
                continue
            try:
                handles[w.id] = self.executor.launch(launch)
            except LaunchError as exc:
                failed.append((w, str(exc)))
        now = self.clock.now()
        with self.store.write() as session:
            record_launches(session, checks, handles, now)
            for w, message in failed:
                launch_failed(session, w, message, now)
            record_event(
                session,
                job,
                kind=EventKind.CHECK,
                actor=ACTOR,
                time=now,
                reason=f"node check started on {', '.join(sorted(nodes))}",
            )
        self.actions.mark_dirty()

    def _floor(self, node: str) -> float | None:
        """The all-reduce floor of the pool ``node`` is in."""
        with self.store.read() as session:
            row = session.get(NodeRow, node)
            pool = (row.effective_labels().get("pool") if row else None) or DEFAULT_POOL
            return session.scalar(select(PoolRow.allreduce_floor).where(PoolRow.name == pool))

    def _check_failed(self, job: JobRow, checks: list[WorkerRow], now: float) -> None:
        blamed, undecided = check_verdict(self.executor, job.id, checks)
        ft = fault_tolerance(job) or FaultTolerance()
        with self.store.write() as session:
            row = self.actions.fresh(session, job)
            if row is None:
                return
            failures = row.check_failures + 1
            give_up = failures >= ft.preflight_tries
            for node, evidence in blamed.items():
                cordon_node(
                    session,
                    node,
                    reason=f"failed the node check of job {job.id}: {evidence}",
                    by=f"check:job {job.id}",
                    now=now,
                )
            evidence = "; ".join(f"{n}: {e}" for n, e in blamed.items()) or undecided
            if give_up:
                action = f"job failed: the node check failed {failures} time(s)"
            elif blamed:
                action = f"cordoned {', '.join(blamed)}; the job is placed again without it"
            else:
                action = "no node could be blamed; the job is placed again"
            _add_fault(
                session,
                row,
                now,
                kind="check",
                cause="node check failed",
                suspect=Suspect.NODE if blamed else Suspect.UNKNOWN,
                node=next(iter(blamed), None),
                evidence=evidence or "the check failed without saying why",
                action=action,
                outcome=action if give_up else None,
            )
            why = f"node check failed ({evidence})"
            if give_up:
                transition(
                    session,
                    row,
                    JobState.FAILED,
                    actor=ACTOR,
                    why=f"{why}; {failures} of {ft.preflight_tries} tries spent",
                    time=now,
                    reason=f"the node check failed {failures} time(s); last: {evidence}",
                    check_failures=failures,
                )
            else:
                self._requeue(session, row, now, why=why, check_failures=failures)
        self.actions.mark_dirty()

    # -- faults ---------------------------------------------------------------------------

    def recover(
        self,
        job: JobRow,
        workers: list[WorkerRow],
        *,
        why: str,
        first: WorkerRow | None,
        diagnosis: Diagnosis | None,
    ) -> bool:
        """A failed running job: restart it if its fault tolerance says so (True), else
        record why not in its fault log and leave the failure to the caller (False)."""
        ft = fault_tolerance(job)
        if ft is None:
            return False
        facts = FailureFacts(
            diagnosis=diagnosis,
            no_restart=tuple(
                w.rank
                for w in workers
                if w.state is WorkerState.EXITED and w.exit_code == EXIT_NO_RESTART
            ),
            first=(first.detail or why) if first is not None else why,
            first_rank=first.rank if first is not None else None,
            first_node=first.node if first is not None else None,
        )
        decision = decide_recovery(ft, job.restarts, facts)
        return self._act(job, workers, decision, kind="failure", failure=why)

    def _act(
        self, job: JobRow, workers: list[WorkerRow], d: Decision, *, kind: str, failure: str
    ) -> bool:
        now = self.clock.now()
        with self.store.write() as session:
            row = self.actions.fresh(session, job)
            if row is None:
                return True  # changed meanwhile: the next pass looks again
            action = f"restarting ({d.why})" if d.restart else f"job fails: {d.why}"
            kept = (fault_tolerance(row) or FaultTolerance()).keep_failed
            if not d.restart and kept:
                action += f"; it is held for debugging first, for {format_duration(kept)}"
            _add_fault(
                session,
                row,
                now,
                kind=kind,
                cause=d.cause,
                suspect=d.suspect,
                rank=d.rank,
                node=d.node,
                evidence=d.evidence or failure,
                action=action,
                outcome=None if d.restart else action,
            )
            if not d.restart:
                return False
            transition(
                session,
                row,
                JobState.RECOVERING,
                actor=ACTOR,
                why=f"{failure}; {d.why}",
                time=now,
                node=d.node,
                reason=f"recovering from a fault: {failure}",
                check_next=d.recheck,
            )
        # A hung worker cannot use a graceful period (a stopped one does not even see the
        # SIGTERM): waiting it out delayed every restart after a hang by that much.
        self.actions.drain(row, JobState.RECOVERING, workers, grace=0.0 if kind == "hang" else None)
        self._look_again(job.id)  # its workers may all have exited already: restart it
        self.actions.mark_dirty()
        return True

    def advance(self, job: JobRow, workers: list[WorkerRow]) -> None:
        """A recovering job: drain its workers; once all exited, restart it."""
        if not all(w.state.is_ended() for w in workers):
            self.actions.drain(job, JobState.RECOVERING, workers)
            return
        self.restart(job, counted=True)

    def restart(self, job: JobRow, *, counted: bool) -> None:
        """Every worker of ``job`` has ended: start it again as its next attempt on the same
        nodes (re-checked first where a fault or its pre-flight asks), or back in the queue if
        one of them is gone or cordoned. ``counted``: it spends a restart of its budget (a
        fault's restart; a person's start of a held job does not)."""
        now = self.clock.now()
        spent: dict[str, Any] = {"restarts": job.restarts + 1} if counted else {}
        ft = fault_tolerance(job) or FaultTolerance()
        placement = [Slot.model_validate(s) for s in job.placement or []]
        names = sorted({s.node for s in placement})
        restarted = False
        with self.store.write() as session:
            row = self.actions.fresh(session, job)
            if row is None:
                return
            ready = {
                n.name
                for n in session.scalars(select(NodeRow).where(NodeRow.name.in_(names)))
                if n.state is NodeState.READY
            }
            resume = ft.recovery is Recovery.RESUME
            if placement and ready == set(names):
                attempt = row.attempt + 1
                check = row.check_next or ft.preflight
                transition(
                    session,
                    row,
                    JobState.STARTING,
                    actor=ACTOR,
                    why=f"every worker has exited; restarting on {', '.join(names)} as "
                    f"attempt {attempt}"
                    + (", after a node check" if check else "")
                    + ("" if resume else ", from scratch"),
                    time=now,
                    attempt=attempt,
                    resume=resume,
                    check_next=False,
                    token=secrets.token_hex(16),
                    reason=None,
                    **spent,
                    **_served(row, now),
                )
                session.add_all(self._new_workers(row, placement, attempt, check))
                restarted = True
            else:
                gone = ", ".join(n for n in names if n not in ready)
                self._requeue(
                    session,
                    row,
                    now,
                    why=f"every worker has exited; {gone} cannot take it back",
                    resume=resume,
                    **spent,
                )
        if restarted:  # launched by the next pass, not by the next full one (up to 2 s on)
            self._look_again(job.id)
        self.actions.mark_dirty()

    def place_elsewhere(self, job: JobRow, node: str, *, why: str) -> None:
        """Back in the queue without ``node`` (added to the job's ``exclude_nodes``), which
        could not hold what the job needs there (a dataset copy without room): nothing is
        cordoned, nothing counts against the job's restarts (docs/datasets.md)."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self.actions.fresh(session, job)
            if row is None:
                return
            excluded = sorted({*(str(n) for n in row.exclude_nodes or ()), node})
            self._requeue(session, row, now, why=why, exclude_nodes=excluded)
        self.actions.mark_dirty()

    def _requeue(self, session: Any, row: JobRow, now: float, *, why: str, **changes: Any) -> None:
        """Back in the queue at its original position, to be placed again (as a suspension
        does, without counting as one)."""
        ft = fault_tolerance(row) or FaultTolerance()
        transition(
            session,
            row,
            JobState.SUSPENDED,
            actor=ACTOR,
            why=f"{why}; back in the queue to be placed again as attempt {row.attempt + 1}",
            time=now,
            attempt=row.attempt + 1,
            **_served(row, now),
            placement=None,
            token=None,
            suspend_deadline=None,
            check_next=ft.preflight,
            reason=f"placed again after a fault ({why})",
            **changes,
        )

    def running_again(self, session: Any, job: JobRow, now: float, nodes: str) -> None:
        """The job's workers all started: close the open entries of its fault log."""
        session.execute(
            update(FaultRow)
            .where(FaultRow.job_id == job.id, FaultRow.outcome.is_(None))
            .values(outcome=f"running again on {nodes} as attempt {job.attempt}", outcome_at=now)
        )

    # -- hangs ----------------------------------------------------------------------------

    def watch(self, job: JobRow, workers: list[WorkerRow]) -> bool:
        """Look at a running job that is watched for hangs or slowness (at most every
        :data:`WATCH_EVERY` seconds); whether it was acted on (it no longer runs as it did)."""
        if (job.hang_timeout is None and job.perf_window is None) or job.started_at is None:
            return False
        now = self.clock.now()
        if now - self._looked.get(job.id, 0.0) < WATCH_EVERY:
            return False
        self._looked[job.id] = now
        live = [w for w in workers if w.state is WorkerState.RUNNING and w.handle is not None]
        if not live:
            return False
        controls = self.executor.control([w.handle or {} for w in live])
        if job.hang_timeout is not None:
            sizes = tuple(self.executor.read_log(w.handle or {}, 0, 1)[1] for w in live)
            progress = max((c.progress_at or 0.0 for c in controls), default=0.0)
            saving = max((c.saving_at or 0.0 for c in controls), default=0.0)
            found = self._quiet(job, now, sizes, progress, saving)
            if found is not None:
                return self._hung(job, workers, *found)
        if job.perf_window is not None:
            slow = self._slow(job, now, controls)
            if slow is not None:
                return self._slowed(job, workers, slow)
        return False

    def _quiet(
        self, job: JobRow, now: float, sizes: tuple[int, ...], progress: float, saving: float
    ) -> tuple[float, bool] | None:
        """Seconds the job has been quiet, once that reaches its ``hang_timeout`` (or
        :data:`HANG_START` before its first progress report; while a worker saves a
        checkpoint, :data:`SAVE_ALLOWANCE` times the timeout: a save that never ends is a hang
        too), and whether it had not reported yet; else None."""
        timeout = (job.hang_timeout or 0.0) * (SAVE_ALLOWANCE if saving else 1.0)
        seen = self._activity.get(job.id)
        if seen is None or seen[0] != sizes or seen[1] != progress:
            since = now if seen is not None else max(job.started_at or now, progress)
            self._activity[job.id] = (sizes, progress, since)
            return None
        quiet = now - seen[2]
        starting = progress <= 0.0  # no report yet (control files are per attempt)
        if starting:
            timeout = max(timeout, HANG_START)
        return (quiet, starting) if quiet >= timeout else None

    def _hung(self, job: JobRow, workers: list[WorkerRow], quiet: float, starting: bool) -> bool:
        self.forget(job.id)
        evidence = (
            f"no worker reported progress or wrote to its log for {format_duration(quiet)} "
            f"(hang_timeout {format_duration(job.hang_timeout or 0.0)}"
            + (
                f"; {format_duration(HANG_START)} before the first progress report)"
                if starting
                else ")"
            )
        )
        base = decide_recovery(
            fault_tolerance(job), job.restarts, FailureFacts(diagnosis=None, first=evidence)
        )
        decision = Decision(base.restart, base.restart, base.why, "hang", Suspect.UNKNOWN, evidence)
        if self._act(job, workers, decision, kind="hang", failure="the job hangs"):
            return True
        if self._hold_failed(job, workers, f"the job hangs: {evidence}"):
            return True
        with self.store.write() as session:
            row = self.actions.fresh(session, job)
            if row is not None:
                transition(
                    session,
                    row,
                    JobState.FAILING,
                    actor=ACTOR,
                    why=f"the job hangs: {evidence}",
                    time=self.clock.now(),
                    reason=f"the job hangs: {evidence}",
                )
        self.actions.drain(job, JobState.FAILING, workers)
        return True

    def _slow(self, job: JobRow, now: float, controls: Sequence[ControlState]) -> Slowness | None:
        """Record the job's newest progress; judge it against its own history."""
        ft = fault_tolerance(job)
        if ft is None or ft.performance is None or (job.id, job.attempt) in self._alerted:
            return None
        reported = [c for c in controls if c.step is not None and c.progress_at is not None]
        if not reported:
            return None
        first = reported[0]  # one reporter throughout (the lowest rank that reports)
        attempt, samples = self._samples.get(job.id, (job.attempt, deque()))
        if attempt != job.attempt:
            samples = deque()
        sample = Sample(first.progress_at or now, first.step or 0, first.hardware_ratio)
        if not samples or samples[-1].time != sample.time:
            samples.append(sample)
            while len(samples) > MAX_SAMPLES:
                samples.popleft()
        self._samples[job.id] = (job.attempt, samples)
        return judge(samples, window=ft.performance.window, threshold=ft.performance.threshold)

    def _slowed(self, job: JobRow, workers: list[WorkerRow], slow: Slowness) -> bool:
        ft = fault_tolerance(job) or FaultTolerance()
        performance = ft.performance
        window = performance.window if performance is not None else 0.0
        evidence = slow.describe(window)
        self._alerted.add((job.id, job.attempt))
        if performance is not None and performance.action is SlowAction.RESCHEDULE:
            base = decide_recovery(ft, job.restarts, FailureFacts(diagnosis=None, first=evidence))
            if base.restart:
                decision = Decision(True, True, base.why, "slow", Suspect.UNKNOWN, evidence)
                self.forget(job.id)
                return self._act(job, workers, decision, kind="performance", failure="slow")
            evidence += f" (not rescheduled: {base.why})"
        now = self.clock.now()
        with self.store.write() as session:
            _add_fault(
                session,
                job,
                now,
                kind="performance",
                cause="slow",
                suspect=Suspect.UNKNOWN,
                evidence=evidence,
                action="alert",
                outcome="alerted; the job goes on",
            )
        self._alert(
            {
                "kind": "performance",
                "job": job.id,
                "name": job.name,
                "owner": job.owner,
                "attempt": job.attempt,
                "time": now,
                "evidence": evidence,
            }
        )
        return False

    def forget(self, job_id: int) -> None:
        self._activity.pop(job_id, None)
        self._looked.pop(job_id, None)
        self._samples.pop(job_id, None)


def check_verdict(
    executor: Executor, job_id: int, checks: Sequence[WorkerRow]
) -> tuple[dict[str, str], str]:
    """What a node check that did not pass found: the nodes it blames (node -> evidence, from
    the end of each check's log; a check killed at its deadline blames its node), and, when it
    blames none, what was seen instead."""
    lines: list[str] = []
    for w in checks:
        if w.handle is not None:
            try:
                lines += log_tail(executor, w.handle, CHECK_LOG_TAIL)
            except Exception:
                log.warning("job %s: could not read a check's log", job_id, exc_info=True)
    nodes = [w.node for w in checks]
    blamed = {f.node: f"{f.test}: {f.evidence}" for f in check_failures(lines, nodes)}
    for w in checks:  # a check killed at its deadline: its node hangs
        if w.detail and "SIGKILL" in w.detail and w.node not in blamed:
            blamed[w.node] = f"the check did not finish within {CHECK_DEADLINE:g} s"
    undecided = "; ".join(inconclusive(lines)) or "; ".join(
        f"{w.node}: {w.detail}" for w in checks if w.exit_code != 0 and w.detail
    )
    return blamed, undecided


def _served(row: JobRow, now: float) -> dict[str, Any]:
    """What the attempt that ends now adds to the job's service (GPU-seconds, ``attained``)
    and to the time its attempts ran (``ran``; the rest since submission is waiting, which
    time-slicing ages by). Nothing for an attempt that never ran: its ``started_at`` is an
    earlier attempt's, counted when that one ended."""
    if row.state is JobState.STARTING or row.started_at is None:
        return {}
    ran = max(0.0, now - row.started_at)
    gpus = sum(len(slot.get("gpus") or ()) for slot in row.placement or [])
    return {"attained": (row.attained or 0.0) + gpus * ran, "ran": (row.ran or 0.0) + ran}


def _add_fault(
    session: Any,
    job: JobRow,
    now: float,
    *,
    kind: str,
    cause: str,
    suspect: Suspect,
    evidence: str,
    action: str,
    rank: int | None = None,
    node: str | None = None,
    outcome: str | None = None,
) -> None:
    session.add(
        FaultRow(
            job_id=job.id,
            attempt=job.attempt,
            at=now,
            kind=kind,
            cause=cause[:128],
            suspect=suspect.value,
            rank=rank,
            node=node,
            evidence=evidence[:2000],
            action=action[:2000],
            outcome=outcome,
            outcome_at=now if outcome is not None else None,
        )
    )
    record_event(
        session,
        job,
        kind=EventKind.FAULT,
        actor=ACTOR,
        time=now,
        node=node,
        reason=f"{kind}: {cause} [suspect: {suspect.value}] — {action}",
    )


def is_check(worker: WorkerRow) -> bool:
    return worker.role == WorkerRole.CHECK
