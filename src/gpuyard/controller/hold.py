"""Held jobs in the controller: keep a failed job for debugging, run what ``gpuyard exec`` asks.

A job is held (docs/jobs.md, "Debugging a job: gpuyard exec") when a person stops it with
``gpuyard exec JOB stop``, or when it fails for good and its ``fault_tolerance.keep_failed``
says to keep it. Its workers are drained as a stop or a failure drains them (``halting``), then
it is ``held``: nothing of its own runs, its nodes stay its own. Each pass of a held job:

- past its ``held_until`` it ends (failing if it was kept after a failure, else stopping), its
  exec workers drained with it;
- the workers a person asked to stop (``stop_grace``: SIGTERM then SIGKILL after that many
  seconds, 0 for ``kill``) are signalled, and a check past its deadline is killed;
- exec workers ``gpuyard exec run`` queued are launched (:mod:`gpuyard.launch.exec_workers`:
  the command in the context of the job's worker on each node), and a held checker's workers
  (:mod:`gpuyard.launch.check`, the pre-flight's own); a shell (``gpuyard exec JOB shell``) is
  planned here (:meth:`Hold.plan_shell`) but launched by the server that relays its terminal,
  and its reservation cancelled if that server never does;
- a run whose workers have all ended closes its usercall in the fault-tolerance log with what
  came of it: each worker's exit, or the check's verdict (a node it blames is cordoned, as a
  pre-flight would).

A person's ``start`` makes it ``restarting``: once nothing of it runs it restarts in place as
the next attempt (:meth:`gpuyard.controller.recovery.FaultRecovery.restart`), without spending
its restart budget.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from pydantic import ValidationError
from sqlalchemy import select, update

from gpuyard.clock import Clock
from gpuyard.controller.apply import launch_spec
from gpuyard.controller.catalogue import catalogue_mounts
from gpuyard.controller.job_actions import JobActions
from gpuyard.controller.recovery import CHECK_DEADLINE, check_verdict, fault_tolerance
from gpuyard.diagnosis.signatures import Suspect
from gpuyard.executors.base import Executor, LaunchError
from gpuyard.launch.accounts import AccountRefused
from gpuyard.launch.check import check_launches
from gpuyard.launch.exec_workers import (
    EXEC_RANK_BASE,
    EXEC_RANK_LIMIT,
    SHELL_ARGV,
    exec_launches,
)
from gpuyard.launch.plan import JobContext
from gpuyard.models import JobState, Slot
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.states import end_of_hold
from gpuyard.models.worker import Handle, WorkerLaunch, WorkerRole, WorkerState
from gpuyard.quantities import format_duration
from gpuyard.services.job_exec import USERCALL
from gpuyard.services.nodes import cordon_node
from gpuyard.services.transitions import record_event, transition
from gpuyard.store.engine import Store
from gpuyard.store.tables import FaultRow, JobRow, WorkerRow
from gpuyard.store.workers import launch_failed, record_launches, set_worker_state

__all__ = ["Hold"]

log = logging.getLogger("gpuyard.controller")

ACTOR = Actor.CONTROLLER
SHELL_RESERVATION = 60.0
"""Seconds a shell's row may wait for the server that reserved it to launch it."""


class Hold:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        clock: Clock,
        actions: JobActions,
        *,
        context: Callable[[JobRow, list[Slot], str | None], JobContext],
        restart: Callable[[JobRow], None],
        kill_backstop: float,
    ) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.actions = actions
        self._context = context
        """The launch context of the job's current attempt on a placement, as an account."""
        self._restart = restart
        self._backstop = kill_backstop
        self._backstop_kills: set[int] = set()

    # -- in: a failure kept for debugging -------------------------------------------------

    def hold_failed(
        self,
        job: JobRow,
        workers: list[WorkerRow],
        why: str,
        *,
        node: str | None = None,
        exit_code: int | None = None,
    ) -> bool:
        """A running job that fails for good: hold it for its ``keep_failed`` instead of
        failing it (its failed workers' processes drained as a failure drains them). Whether
        it asked to be kept."""
        ft = fault_tolerance(job)
        kept = ft.keep_failed if ft is not None else None
        if not kept:
            return False
        now = self.clock.now()
        ended = all(w.state.is_ended() for w in workers)
        target = JobState.HELD if ended else JobState.HALTING
        with self.store.write() as session:
            row = self.actions.fresh(session, job)
            if row is None:
                return True  # changed meanwhile: the next pass looks again
            transition(
                session,
                row,
                target,
                actor=ACTOR,
                why=f"{why}; kept for debugging until {_clock(now + kept)} UTC "
                "(fault_tolerance.keep_failed)",
                time=now,
                node=node,
                held_until=now + kept,
                hold_outcome=JobState.FAILED,
                reason=f"{why}; kept for debugging for at most {format_duration(kept)} "
                "(fault_tolerance.keep_failed)",
                exit_code=exit_code,
            )
        if not ended:
            self.actions.drain(row, JobState.HALTING, workers)
        self.actions.mark_dirty()
        return True

    # -- held -----------------------------------------------------------------------------

    def advance(self, job: JobRow, workers: list[WorkerRow]) -> None:
        """One step of a held job (see the module's docstring)."""
        now = self.clock.now()
        if job.held_until is not None and now >= job.held_until:
            self._lapse(job, workers, now)
            return
        self._signal(job, workers, now)
        pending = [
            w
            for w in workers
            if w.handle is None
            and w.state is WorkerState.PENDING
            and w.stop_grace is None
            and w.role != WorkerRole.SHELL  # the server that reserved it launches it
        ]
        if pending:
            self._launch(job, pending)
        self._settle_runs(job, workers, now)

    def restart(self, job: JobRow, workers: list[WorkerRow]) -> None:
        """A held job a person started again: once nothing of it runs, restart it in place."""
        if not all(w.state.is_ended() for w in workers):
            self.actions.drain(job, JobState.RESTARTING, workers)
            return
        self._restart(job)

    def _lapse(self, job: JobRow, workers: list[WorkerRow], now: float) -> None:
        """Its hold reached its time limit: it ends, as it would have without the hold."""
        target = end_of_hold(job.hold_outcome)
        with self.store.write() as session:
            row = self.actions.fresh(session, job)
            if row is None:
                return
            until = _clock(row.held_until or now)
            transition(
                session,
                row,
                target,
                actor=ACTOR,
                why=f"its hold reached its time limit ({until} UTC)",
                time=now,
                reason=f"{row.reason or 'held'}; its hold ended at its time limit",
                held_until=None,
                hold_outcome=None,
            )
        self.actions.drain(row, target, workers)

    def _signal(self, job: JobRow, workers: list[WorkerRow], now: float) -> None:
        """Stop what a person asked to stop; kill a check past its deadline."""
        signalled: list[WorkerRow] = []
        notes: list[tuple[WorkerRow, str]] = []
        for w in workers:
            if w.state is not WorkerState.RUNNING or w.handle is None:
                continue
            if w.stop_grace is not None:
                sent, note = self._stop(w, w.handle, w.stop_grace, now)
                if sent:
                    signalled.append(w)
                if note:
                    notes.append((w, note))
            elif (
                w.role == WorkerRole.CHECK and w.started_at and now > w.started_at + CHECK_DEADLINE
            ):
                self.executor.kill(w.handle)
        cancelled = [
            w
            for w in workers
            if w.state is WorkerState.PENDING
            and w.handle is None
            and (w.stop_grace is not None or _abandoned(w, now))
        ]
        if not (signalled or notes or cancelled):
            return
        with self.store.write() as session:
            for w in signalled:
                session.execute(
                    update(WorkerRow).where(WorkerRow.id == w.id).values(terminate_sent_at=now)
                )
            for w, note in notes:
                record_event(
                    session,
                    job,
                    kind=EventKind.SIGNAL,
                    actor=ACTOR,
                    node=w.node,
                    time=now,
                    reason=note,
                )
            for w in cancelled:
                set_worker_state(
                    session,
                    w,
                    WorkerState.CANCELLED,
                    WorkerRow.handle.is_(None),
                    detail="stopped before it started"
                    if w.stop_grace is not None
                    else "the server that opened this shell never started it",
                    finished_at=now,
                )
        self.actions.mark_dirty()

    def _stop(self, w: WorkerRow, handle: Handle, grace: float, now: float) -> tuple[bool, str]:
        """Signal a worker a person asked to stop: (whether this is its first signal, what to
        record)."""
        if grace <= 0:  # killed: at once, even if it was told to stop before (idempotent)
            self.executor.kill(handle)
            if w.id in self._backstop_kills:
                return False, ""
            self._backstop_kills.add(w.id)
            return (
                w.terminate_sent_at is None,
                f"SIGKILL sent to worker {w.rank} (gpuyard exec kill)",
            )
        if w.terminate_sent_at is None:
            self.executor.terminate(handle, grace)
            return True, (
                f"SIGTERM sent to worker {w.rank} (gpuyard exec stop); SIGKILL if it is still "
                f"running after {format_duration(grace)}"
            )
        if now > w.terminate_sent_at + grace + self._backstop:
            self.executor.kill(handle)
            if w.id not in self._backstop_kills:
                self._backstop_kills.add(w.id)
                return False, f"SIGKILL sent to worker {w.rank}: it outlived its stop"
        return False, ""

    # -- launching a run ------------------------------------------------------------------

    def _launch(self, job: JobRow, pending: list[WorkerRow]) -> None:
        """Launch the exec and check workers ``gpuyard exec run`` queued. Whatever goes wrong
        is that worker's (LOST, with why): a launched worker is never forgotten."""
        handles: dict[int, Handle] = {}
        failed: dict[int, str] = {}
        try:
            try:
                launches = self._plan(job, pending)
            except (AccountRefused, LaunchError, ValidationError, ValueError) as exc:
                failed = {w.id: f"cannot plan the run: {_first_line(exc)}" for w in pending}
                launches = {}
            for w in pending:
                launch = launches.get(w.id)
                if launch is None:
                    failed.setdefault(w.id, "no launch was planned for this worker")
                    continue
                try:
                    handles[w.id] = self.executor.launch(launch)
                except LaunchError as exc:
                    failed[w.id] = str(exc)
        finally:
            self._launched(job, pending, handles, failed)

    def _plan(self, job: JobRow, pending: list[WorkerRow]) -> dict[int, WorkerLaunch]:
        placement = [Slot.model_validate(s) for s in job.placement or []]
        run_as = self.actions.account(job)
        nodes = {w.node for w in pending}
        base_env = {n: self.executor.base_env(n) for n in nodes}
        planned: dict[int, WorkerLaunch] = {}
        checks = [w for w in pending if w.role == WorkerRole.CHECK]
        if checks:
            by_rank = {
                launch.key.rank: launch
                for launch in check_launches(
                    job_id=job.id,
                    attempt=job.attempt,
                    placement=placement,
                    tools=self.executor.tools(),
                    base_env=base_env,
                    gpu_devices=self.actions.gpu_devices(),
                    job_dir=self.executor.job_dir(job.id),
                    run_as=run_as,
                    rank_base=min(w.rank for w in checks),
                )
            }
            planned.update((w.id, by_rank[w.rank]) for w in checks if w.rank in by_rank)
        execs = [w for w in pending if w.role == WorkerRole.EXEC and isinstance(w.argv, list)]
        runs: dict[tuple[str, ...], list[WorkerRow]] = {}
        for w in execs:
            runs.setdefault(tuple(str(a) for a in w.argv or ()), []).append(w)
        for argv, members in runs.items():
            launches = self.plan_exec(
                job, {w.rank: w.node for w in members}, argv, run_as=run_as, base_env=base_env
            )
            by_rank = {launch.key.rank: launch for launch in launches}
            planned.update((w.id, by_rank[w.rank]) for w in members)
        return planned

    def plan_shell(self, job: JobRow, rank: int, node: str) -> WorkerLaunch:
        """The launch of a shell (``gpuyard exec JOB shell``) at ``rank`` on ``node``: an exec
        worker running :data:`SHELL_ARGV`, which the server launches on a terminal."""
        [launch] = self.plan_exec(job, {rank: node}, SHELL_ARGV, role=WorkerRole.SHELL)
        return launch

    def plan_exec(
        self,
        job: JobRow,
        ranks: Mapping[int, str],
        argv: Sequence[str],
        *,
        role: WorkerRole = WorkerRole.EXEC,
        run_as: str | None = None,
        base_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[WorkerLaunch]:
        """The launches of exec workers ``ranks`` (rank -> node) of the job's current attempt
        running ``argv`` (the server plans a shell with it: ``role`` shell). Raises
        AccountRefused, LaunchError (a dataset it mounts is no longer its owner's), or
        ValueError / ValidationError for a job that cannot be planned."""
        placement = [Slot.model_validate(s) for s in job.placement or []]
        if run_as is None:
            run_as = self.actions.account(job)
        if base_env is None:
            base_env = {n: self.executor.base_env(n) for n in set(ranks.values())}
        # The versions themselves (not the nodes' copies), still the owner's to mount.
        spec, held = catalogue_mounts(
            self.store, launch_spec(job.job_spec(), len(placement)), job.owner
        )
        return exec_launches(
            spec,
            dataclasses.replace(self._context(job, placement, run_as), held=held),
            argv=argv,
            ranks=ranks,
            base_env=base_env,
            role=role,
        )

    def _launched(
        self,
        job: JobRow,
        pending: list[WorkerRow],
        handles: dict[int, Handle],
        failed: dict[int, str],
    ) -> None:
        now = self.clock.now()
        with self.store.write() as session:
            record_launches(session, pending, handles, now)
            for w in pending:
                if w.id in failed:
                    launch_failed(session, w, failed[w.id], now)
            started = [w for w in pending if w.id in handles]
            if started:
                record_event(
                    session,
                    job,
                    kind=EventKind.EXEC,
                    actor=ACTOR,
                    time=now,
                    reason="launched worker(s) "
                    + ", ".join(f"{w.rank} ({w.role}) on {w.node}" for w in started),
                )
            for w in pending:
                if w.id in failed:
                    record_event(
                        session,
                        job,
                        kind=EventKind.EXEC,
                        actor=ACTOR,
                        node=w.node,
                        time=now,
                        reason=f"worker {w.rank} could not start: {failed[w.id][:500]}",
                    )
        self.actions.mark_dirty()

    # -- what came of a run ---------------------------------------------------------------

    def _settle_runs(self, job: JobRow, workers: list[WorkerRow], now: float) -> None:
        """Close the usercall of each run whose workers have all ended, with what came of it.
        A run's workers are the ranks from its entry's up to the next run's (runs take their
        ranks one after another)."""
        runs = [w for w in workers if w.rank >= EXEC_RANK_BASE]
        if not runs:
            return
        with self.store.read() as session:
            entries = list(
                session.scalars(
                    select(FaultRow)
                    .where(
                        FaultRow.job_id == job.id,
                        FaultRow.attempt == job.attempt,
                        FaultRow.kind == USERCALL,
                        FaultRow.rank.is_not(None),
                    )
                    .order_by(FaultRow.rank)
                )
            )
        firsts = [e.rank or 0 for e in entries]
        for i, entry in enumerate(entries):
            if entry.outcome is not None:
                continue
            end = firsts[i + 1] if i + 1 < len(firsts) else EXEC_RANK_LIMIT
            members = [w for w in runs if firsts[i] <= w.rank < end]
            if not members or not all(w.state.is_ended() for w in members):
                continue
            if all(w.role == WorkerRole.CHECK for w in members):
                self._checked(job, entry, members, now)
            else:
                self._close(job, entry, _exits(members), now)

    def _checked(self, job: JobRow, entry: FaultRow, checks: list[WorkerRow], now: float) -> None:
        """A held job's node check ended: report it; a node it blames is cordoned, as the
        pre-flight's would be (a ``start`` then places the job again without it)."""
        nodes = ", ".join(w.node for w in checks)
        if all(w.state is WorkerState.EXITED and w.exit_code == 0 for w in checks):
            self._close(job, entry, f"the node check passed on {nodes}", now)
            return
        blamed, undecided = check_verdict(self.executor, job.id, checks)
        if blamed:
            evidence = "; ".join(f"{n}: {e}" for n, e in blamed.items())
            outcome = (
                f"the node check failed: {evidence}; cordoned {', '.join(blamed)} "
                f"(`gpuyard exec {job.id} start` places the job again without it)"
            )
        else:
            evidence = undecided or "the check failed without saying why"
            outcome = f"the node check failed, blaming no node: {evidence}"
        self._close(job, entry, outcome, now, cordon=blamed)

    def _close(
        self,
        job: JobRow,
        entry: FaultRow,
        outcome: str,
        now: float,
        *,
        cordon: Mapping[str, str] | None = None,
    ) -> None:
        with self.store.write() as session:
            closed = session.execute(
                update(FaultRow)
                .where(FaultRow.id == entry.id, FaultRow.outcome.is_(None))
                .values(outcome=outcome[:2000], outcome_at=now)
            )
            if not getattr(closed, "rowcount", 1):
                return  # closed meanwhile
            for node, evidence in (cordon or {}).items():
                cordon_node(
                    session,
                    node,
                    reason=f"failed the node check of job {job.id} (gpuyard exec run -t "
                    f"checker): {evidence}",
                    by=f"check:job {job.id}",
                    now=now,
                )
            suspect = f" [suspect: {Suspect.NODE.value}]" if cordon else ""
            record_event(
                session,
                job,
                kind=EventKind.EXEC,
                actor=ACTOR,
                time=now,
                reason=f"{entry.cause}: {outcome}"[:1900] + suspect,
            )
        if cordon:
            self.actions.mark_dirty()


def _abandoned(worker: WorkerRow, now: float) -> bool:
    """A shell a server reserved (``started_at``: when) and never launched: it went away."""
    return (
        worker.role == WorkerRole.SHELL
        and worker.started_at is not None
        and now > worker.started_at + SHELL_RESERVATION
    )


def _exits(workers: Sequence[WorkerRow]) -> str:
    """How each worker of a run ended, in one line."""
    return "; ".join(
        w.detail or f"worker {w.rank} on {w.node}: {w.state.value}, exit code {w.exit_code}"
        for w in workers
    )


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:500]


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
