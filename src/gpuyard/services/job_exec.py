"""``gpuyard exec``: hold a job, run commands on its nodes, start it again (docs/jobs.md).

The rules of each action, and nothing that touches a process: the service checks who asks and
in which state the job is, writes the change (a transition, exec worker rows, a request to stop
workers) with a usercall entry in the job's fault-tolerance log, and pokes the controller, which
does the rest (:mod:`gpuyard.controller.hold`). So ``run`` answers at once, as ``jmt run`` does:
what the command printed is in its workers' logs (``gpuyard logs JOB --worker RANK``).

Whoever may stop the job may hold it and read its exec status (:data:`HOLD_ACTION`); what
runs code as the job's owner (``run``, ``kill``, ``start``, shells) is its owner's alone
(:data:`EXEC_ACTION`, ``Action.ENTER``), and admins' only where the pool allows it
(``GPUYARD_ADMIN_EXEC``): each such entry by an admin is also in the audit trail as
``job.exec.admin`` (docs/security.md). A request that is refused (403, 404, 409, 422)
changes nothing and is not logged; every accepted one is an entry of kind ``usercall`` with its
actor, its command and, once known, its outcome.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import Conflict, NotFound
from gpuyard.launch.check import CHECK_RANK_BASE
from gpuyard.launch.exec_workers import (
    EXEC_RANK_BASE,
    EXEC_RANK_LIMIT,
    SHELL_ARGV,
    exec_ranks,
)
from gpuyard.models import FaultTolerance, JobState, Slot
from gpuyard.models.access import Action
from gpuyard.models.actor import Actor
from gpuyard.models.events import EventKind
from gpuyard.models.execs import ExecOutcome, ExecRun, ExecStatus, ExecTarget, ExecWorker
from gpuyard.models.states import HELD_STATES, PENDING, end_of_hold
from gpuyard.models.worker import WorkerRole, WorkerState
from gpuyard.quantities import format_duration
from gpuyard.services.auth import Policy
from gpuyard.services.notify import Notify, nobody
from gpuyard.services.transitions import record_event, transition
from gpuyard.services.views import to_datetime
from gpuyard.store.engine import Store
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import FaultRow, JobRow, WorkerRow

__all__ = [
    "DEFAULT_HOLD",
    "EXEC_ACTION",
    "HOLD_ACTION",
    "USERCALL",
    "ExecService",
    "stop_held",
    "usercall",
]

EXEC_ACTION = Action.ENTER
"""What a caller must be allowed to do to a job to run code in it (as its owner)."""
HOLD_ACTION = Action.STOP
"""What a caller must be allowed to do to a job to hold it (``exec stop``) or read its status."""
ADMIN_ENTRY = "job.exec.admin"
"""The audit action of an admin entering another user's job."""
DEFAULT_HOLD = 3600.0
"""How long ``gpuyard exec JOB stop`` holds a job when neither it nor the job says."""
USERCALL = "usercall"
_HOLDABLE = frozenset({JobState.STARTING, JobState.RUNNING, JobState.RECOVERING})


class ExecService:
    def __init__(
        self, store: Store, *, clock: Clock, policy: Policy, notify: Notify = nobody
    ) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy
        self.notify = notify

    # -- reading --------------------------------------------------------------------------

    def status(self, job_id: int, *, actor: str) -> ExecStatus:
        """The job's state and every worker of its current attempt (its own, its checks, its
        exec workers), with each one's supervisor pid where it has one."""
        with self.store.read() as session:
            row = self._may(session, actor, job_id, HOLD_ACTION)
            workers = _workers(session, row)
            return ExecStatus(
                job_id=row.id,
                state=row.state,
                status=row.state.status,
                attempt=row.attempt,
                held_until=to_datetime(row.held_until) if row.state in HELD_STATES else None,
                reason=row.reason,
                workers=[_worker_view(w) for w in workers],
            )

    # -- stop -----------------------------------------------------------------------------

    def stop(self, job_id: int, *, actor: str, hold: float | None = None) -> ExecOutcome:
        """Hold a running job: its workers get SIGTERM (SIGKILL after its graceful period),
        its nodes stay its own for ``hold`` seconds. Of a held job: stop what ``run`` started
        (and with ``hold``, hold it that long from now)."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self._may(session, actor, job_id, HOLD_ACTION)
            state = row.state
            command = "exec stop" + (f" --hold {format_duration(hold)}" if hold else "")
            if state is JobState.HALTING:
                return _outcome(row, "stop", "it is already being held: its workers are exiting")
            if state is JobState.HELD:
                outcome, ranks = self._stop_runs(session, row, now)
                if hold:
                    guarded_update(session, row, held_until=now + hold)
                    outcome += f"; now held until {_clock(now + hold)} UTC"
                usercall(session, row, now, actor=actor, command=command, action=outcome)
            elif state in _HOLDABLE:
                outcome, ranks = self._hold(session, row, now, actor=actor, hold=hold), []
                usercall(session, row, now, actor=actor, command=command, action=outcome)
            else:
                raise Conflict(_cannot_hold(row), extra={"state": state.value})
            self.policy.audit.record(
                session, Actor.user(actor), "job.exec", f"job:{job_id}", command
            )
            result = _outcome(row, "stop", outcome, ranks)
        self.notify(job_id)
        return result

    def _hold(
        self, session: Session, row: JobRow, now: float, *, actor: str, hold: float | None
    ) -> str:
        ft = _fault_tolerance(row)
        limit = hold or (ft.keep_failed if ft is not None else None) or DEFAULT_HOLD
        until = now + limit
        transition(
            session,
            row,
            JobState.HALTING,
            actor=Actor.user(actor),
            why=f"held by {actor} (gpuyard exec stop) for at most {format_duration(limit)}",
            time=now,
            held_until=until,
            hold_outcome=JobState.STOPPED,
            reason=f"held by {actor} (gpuyard exec stop) for at most {format_duration(limit)}",
        )
        grace = format_duration(row.grace())
        return (
            f"its workers were told to exit (SIGTERM, SIGKILL after {grace}); it is held until "
            f"{_clock(until)} UTC"
        )

    def _stop_runs(self, session: Session, row: JobRow, now: float) -> tuple[str, list[int]]:
        live = [w for w in _workers(session, row) if _is_run(w) and not w.state.is_ended()]
        asked = [w for w in live if w.stop_grace is None]
        if not live:
            return "nothing of it runs (it stays held)", []
        grace = row.grace()
        _ask_to_stop(session, asked, grace)
        ranks = [w.rank for w in live]
        return (
            f"worker(s) {_ranks(ranks)} told to exit (SIGTERM, SIGKILL after "
            f"{format_duration(grace)}); it stays held",
            ranks,
        )

    # -- start ----------------------------------------------------------------------------

    def start(self, job_id: int, *, actor: str, command: str = "exec start") -> ExecOutcome:
        """Run a held job's command again, as its next attempt on the same nodes (checked
        first when its fault tolerance asks for a pre-flight), as a fault restart would,
        without counting against its restart budget."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self._may(session, actor, job_id)
            self._require_held(row, "start it again")
            live = [w for w in _workers(session, row) if not w.state.is_ended()]
            if live:
                raise Conflict(
                    f"job {job_id}: worker(s) {_ranks([w.rank for w in live])} still run; wait "
                    f"for them, or stop them first (`gpuyard exec {job_id} stop`)",
                    extra={"state": row.state.value},
                )
            transition(
                session,
                row,
                JobState.RESTARTING,
                actor=Actor.user(actor),
                why=f"started again by {actor} ({command})",
                time=now,
                held_until=None,
                hold_outcome=None,
                exit_code=None,
                reason=f"started again by {actor}",
            )
            action = f"restarting as attempt {row.attempt + 1} on the same nodes"
            usercall(session, row, now, actor=actor, command=command, action=action, done=False)
            self.policy.audit.record(
                session, Actor.user(actor), "job.exec", f"job:{job_id}", command
            )
            result = _outcome(row, "start", action)
        self.notify(job_id)
        return result

    # -- run ------------------------------------------------------------------------------

    def run(self, job_id: int, request: ExecRun, *, actor: str) -> ExecOutcome:
        """Run a command (or the node check) once on each node of a held job, as exec
        workers of its current attempt; answers once they are queued for launch."""
        if request.target is ExecTarget.TASK:
            return self.start(job_id, actor=actor, command="exec run -t task")
        checker = request.target is ExecTarget.CHECKER
        command = "exec run -t checker" if checker else f"exec run {shlex.join(request.command)}"
        now = self.clock.now()
        with self.store.write() as session:
            row = self._may(session, actor, job_id)
            self._require_held(row, "run a command in it")
            workers = _workers(session, row)
            _one_run_at_a_time(row, workers)
            placement = [Slot.model_validate(s) for s in row.placement or []]
            if not placement:
                raise Conflict(f"job {job_id} has no nodes to run on", extra={"state": "held"})
            first = max((w.rank + 1 for w in workers if w.rank >= EXEC_RANK_BASE), default=0)
            try:
                ranks = exec_ranks(placement, max(first, EXEC_RANK_BASE))
            except ValueError:
                raise Conflict(
                    f"job {job_id}'s attempt {row.attempt} has run as many exec workers as one "
                    f"attempt may; start it again (`gpuyard exec {job_id} start`) or end it"
                ) from None
            session.add_all(
                WorkerRow(
                    job_id=row.id,
                    attempt=row.attempt,
                    rank=rank,
                    node=node,
                    role=WorkerRole.CHECK if checker else WorkerRole.EXEC,
                    task=0,
                    primary=False,
                    state=WorkerState.PENDING,
                    argv=None if checker else list(request.command),
                )
                for rank, node in ranks.items()
            )
            what = "the node check" if checker else "the command"
            on = ", ".join(f"{node} (worker {rank})" for rank, node in ranks.items())
            action = f"{what} starts on {on}; its output: `gpuyard logs {job_id} --worker RANK`"
            usercall(
                session,
                row,
                now,
                actor=actor,
                command=command,
                action=action,
                rank=min(ranks),
                done=False,
            )
            self.policy.audit.record(
                session, Actor.user(actor), "job.exec", f"job:{job_id}", command[:2000]
            )
            result = _outcome(row, "run", action, list(ranks))
        self.notify(job_id)
        return result

    # -- kill -----------------------------------------------------------------------------

    def kill(self, job_id: int, ranks: Sequence[int], *, actor: str) -> ExecOutcome:
        """SIGKILL the processes of these workers of a held job (those ``run`` started; the
        job's own have exited already). An unknown rank refuses the whole request."""
        now = self.clock.now()
        command = "exec kill " + " ".join(map(str, ranks))
        with self.store.write() as session:
            row = self._may(session, actor, job_id)
            self._require_held(row, "kill its workers")
            by_rank = {w.rank: w for w in _workers(session, row)}
            unknown = [r for r in ranks if r not in by_rank]
            if unknown:
                raise NotFound(
                    f"job {job_id} has no worker {unknown[0]} in its attempt {row.attempt}; "
                    f"its workers are {_ranks(sorted(by_rank))} (`gpuyard exec {job_id} status`)"
                )
            live = [by_rank[r] for r in ranks if not by_rank[r].state.is_ended()]
            ended = [r for r in ranks if by_rank[r].state.is_ended()]
            _ask_to_stop(session, [w for w in live if w.stop_grace != 0.0], 0.0)
            parts = []
            if live:
                parts.append(f"worker(s) {_ranks([w.rank for w in live])} killed (SIGKILL)")
            if ended:
                parts.append(f"worker(s) {_ranks(ended)} had already ended")
            outcome = "; ".join(parts)
            usercall(session, row, now, actor=actor, command=command, action=outcome)
            self.policy.audit.record(
                session, Actor.user(actor), "job.exec", f"job:{job_id}", command[:2000]
            )
            result = _outcome(row, "kill", outcome, [w.rank for w in live])
        self.notify(job_id)
        return result

    # -- shell --------------------------------------------------------------------------

    def reserve_shell(self, job_id: int, *, actor: str, worker: int) -> tuple[JobRow, int, str]:
        """The row of a shell in the context of the held job's ``worker`` (its node), at the
        next exec rank, for :class:`gpuyard.services.shell.ShellService` to launch: the job
        (as read), the shell's rank and its node. A shell is a run: one at a time."""
        now = self.clock.now()
        command = f"exec shell --worker {worker}"
        with self.store.write() as session:
            row = self._may(session, actor, job_id)
            self._require_held(row, "open a shell in it")
            workers = _workers(session, row)
            _one_run_at_a_time(row, workers)
            own = {w.rank: w for w in workers if w.rank < CHECK_RANK_BASE}
            if worker not in own:
                raise NotFound(
                    f"job {job_id} has no worker {worker} in its attempt {row.attempt}; a shell "
                    f"takes the context of one of its own workers: {_ranks(sorted(own))}"
                )
            node = own[worker].node
            rank = max((w.rank + 1 for w in workers if w.rank >= EXEC_RANK_BASE), default=0)
            rank = max(rank, EXEC_RANK_BASE)
            if rank >= EXEC_RANK_LIMIT:
                raise Conflict(
                    f"job {job_id}'s attempt {row.attempt} has run as many exec workers as one "
                    f"attempt may; start it again (`gpuyard exec {job_id} start`) or end it"
                )
            session.add(
                WorkerRow(
                    job_id=row.id,
                    attempt=row.attempt,
                    rank=rank,
                    node=node,
                    role=WorkerRole.SHELL,
                    task=0,
                    primary=False,
                    state=WorkerState.PENDING,
                    argv=list(SHELL_ARGV),
                    started_at=now,  # when it was reserved, until it starts
                )
            )
            action = f"a shell on {node} as worker {rank}, in worker {worker}'s context"
            usercall(
                session,
                row,
                now,
                actor=actor,
                command=command,
                action=action,
                rank=rank,
                done=False,
            )
            self.policy.audit.record(
                session, Actor.user(actor), "job.exec", f"job:{job_id}", command
            )
        return row, rank, node

    # -- helpers --------------------------------------------------------------------------

    def _may(
        self, session: Session, actor: str, job_id: int, action: Action = EXEC_ACTION
    ) -> JobRow:
        """The job, if ``actor`` may do ``action`` to it; an admin entering another user's job
        (which the pool allowed, or it would have been refused) is audited as such."""
        row = self.policy.check_job(session, actor, session.get(JobRow, job_id), job_id, action)
        if action is EXEC_ACTION and row.owner != actor:
            self.policy.audit.record(
                session, Actor.user(actor), ADMIN_ENTRY, f"job:{job_id}", f"owner {row.owner}"
            )
        return row

    def _require_held(self, row: JobRow, what: str) -> None:
        state = row.state
        if state is JobState.HELD and (row.held_until is None or row.held_until > self.clock.now()):
            return
        if state is JobState.HELD:
            why = "its hold has reached its time limit and it is ending"
        elif state is JobState.HALTING:
            why = "its workers are still exiting; try again once it is held (`gpuyard exec "
            why += f"{row.id} status`)"
        elif state in _HOLDABLE:
            why = f"it runs; hold it first (`gpuyard exec {row.id} stop`)"
        elif state.is_terminal():
            why = f"it has already ended ({state.status.label})"
        else:
            why = f"it is {state.value}"
        raise Conflict(
            f"job {row.id} is not held, so you cannot {what}: {why}",
            extra={"state": state.value},
        )


def usercall(
    session: Session,
    row: JobRow,
    now: float,
    *,
    actor: str,
    command: str,
    action: str,
    rank: int | None = None,
    done: bool = True,
) -> None:
    """A usercall entry of the job's fault-tolerance log (and its event): ``done`` closes it
    at once with ``action`` as its outcome; else the controller records the outcome later."""
    session.add(
        FaultRow(
            job_id=row.id,
            attempt=row.attempt,
            at=now,
            kind=USERCALL,
            cause=command[:128],
            suspect="none",
            rank=rank,
            node=None,
            evidence=command[:2000],
            action=action[:2000],
            outcome=action[:2000] if done else None,
            outcome_at=now if done else None,
            actor=Actor.user(actor)[:96],
        )
    )
    record_event(
        session,
        row,
        kind=EventKind.USERCALL,
        actor=Actor.user(actor),
        time=now,
        reason=f"{command[:500]}: {action}",
    )


def stop_held(row: JobRow, actor: str) -> tuple[JobState, str]:
    """Where ``gpuyard stop`` sends a held job, and its reason: a job held after it failed still
    ends as failed, with its failure as its reason."""
    target = end_of_hold(row.hold_outcome)
    if target is JobState.FAILING:
        return target, f"{row.reason or 'failed'}; {actor} ended its hold"
    return target, f"stopped by {actor}"


def _fault_tolerance(row: JobRow) -> FaultTolerance | None:
    spec = row.loaded_spec()
    return spec.fault_tolerance if spec is not None else None


def _workers(session: Session, row: JobRow) -> list[WorkerRow]:
    return list(
        session.scalars(
            select(WorkerRow)
            .where(WorkerRow.job_id == row.id, WorkerRow.attempt == row.attempt)
            .order_by(WorkerRow.rank)
        )
    )


def _is_run(worker: WorkerRow) -> bool:
    """Whether ``gpuyard exec run`` started it (a command, or a held job's node check)."""
    return worker.rank >= EXEC_RANK_BASE


def _ask_to_stop(session: Session, workers: Sequence[WorkerRow], grace: float) -> None:
    if workers:
        session.execute(
            update(WorkerRow)
            .where(WorkerRow.id.in_([w.id for w in workers]))
            .values(stop_grace=grace)
        )


def _worker_view(w: WorkerRow) -> ExecWorker:
    pid = (w.handle or {}).get("pid")
    return ExecWorker(
        rank=w.rank,
        role=w.role,
        attempt=w.attempt,
        node=w.node,
        state=w.state,
        exit_code=w.exit_code,
        detail=w.detail,
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        command=[str(a) for a in w.argv] if isinstance(w.argv, list) else None,
        started_at=to_datetime(w.started_at),
        finished_at=to_datetime(w.finished_at),
    )


def _outcome(row: JobRow, action: str, outcome: str, ranks: Sequence[int] = ()) -> ExecOutcome:
    return ExecOutcome(
        job_id=row.id, action=action, outcome=outcome, state=row.state, ranks=list(ranks)
    )


def _ranks(ranks: Sequence[int]) -> str:
    shown = ", ".join(map(str, ranks[:20]))
    return shown + (f" and {len(ranks) - 20} more" if len(ranks) > 20 else "")


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _cannot_hold(row: JobRow) -> str:
    state = row.state
    if state in PENDING:
        return (
            f"job {row.id} is {state.status.label}: none of its processes run, so there is "
            f"nothing to stop and hold (`gpuyard stop {row.id}` ends it)"
        )
    if state.is_terminal():
        return f"job {row.id} has already ended ({state.status.label}); nothing to hold"
    if state is JobState.RESTARTING:
        return (
            f"job {row.id} is being started again; hold it once it runs "
            f"(`gpuyard exec {row.id} stop`)"
        )
    return f"job {row.id} is {state.value}; a job can be held only while it runs"


def _one_run_at_a_time(row: JobRow, workers: list[WorkerRow]) -> None:
    """Refuse a run (or a shell) while an earlier one of the held job still runs."""
    running = [w.rank for w in workers if _is_run(w) and not w.state.is_ended()]
    if running:
        raise Conflict(
            f"job {row.id}: an earlier run still runs (worker(s) {_ranks(running)}); one run "
            f"at a time: wait for it, or stop it (`gpuyard exec {row.id} stop`)",
            extra={"state": row.state.value},
        )
