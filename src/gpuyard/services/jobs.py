"""Job rules: submit, list, show, stop, delete, clone, events.

Routers call one function here; everything that decides something about a job lives here or in
:mod:`gpuyard.services.transitions`. Bad input raises :class:`InvalidSpec` before
anything is written, so a rejected submission stores nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import Table, bindparam, delete, func, insert, select, update
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import Conflict, GpuyardError, InvalidSpec, NotFound, PermissionDenied
from gpuyard.models import (
    BulkResult,
    FaultEntry,
    JobEvent,
    JobFailure,
    JobSpec,
    JobState,
    JobView,
    Page,
    Priority,
)
from gpuyard.models.access import Action
from gpuyard.models.actor import Actor
from gpuyard.models.disclosure import env_for
from gpuyard.models.events import EventKind
from gpuyard.models.image import pinned_digest
from gpuyard.models.job import MAX_BATCH
from gpuyard.models.job_query import MAX_PAGE, JobQuery
from gpuyard.models.request import request_of
from gpuyard.models.states import HELD_STATES, PENDING, check_transition
from gpuyard.models.validation import readable_validation_errors
from gpuyard.quantities import format_duration
from gpuyard.services.accounts import DEFAULT_GROUP, AccountService
from gpuyard.services.admission import Admission
from gpuyard.services.auth import Policy
from gpuyard.services.disclosure import Viewer
from gpuyard.services.images import ImagePinner
from gpuyard.services.job_exec import stop_held
from gpuyard.services.job_search import check_page, filtered, ordering
from gpuyard.services.notify import Notify, nobody
from gpuyard.services.suspension import set_held
from gpuyard.services.transitions import record_event, transition
from gpuyard.services.views import event_view, job_view, queued_view
from gpuyard.store.engine import Store
from gpuyard.store.group_commit import GroupCommit
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import (
    EventRow,
    FaultRow,
    GroupRow,
    JobRow,
    SignalRow,
    UserRow,
    WorkerRow,
    request_columns,
)

__all__ = ["JobService"]


class JobService:
    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        notify: Notify = nobody,
        on_delete: Callable[[int], None] = lambda _job_id: None,
        accounts: AccountService | None = None,
        policy: Policy | None = None,
        images: ImagePinner | None = None,
        program_check: Callable[[JobSpec, str], None] | None = None,
    ) -> None:
        self.store = store
        self.program_check = program_check
        """Whether the job's account can run its program (:mod:`gpuyard.services.program_check`),
        where this pool can tell; None: not checked at submission."""
        self.images = images or ImagePinner(None, lambda _user, _ref: False)
        self.resolve: Callable[..., list[JobSpec]] = lambda specs, owner: list(specs)
        """What a spec names beyond itself, filled in before it is checked: a TensorBoard's
        source jobs' outputs (:meth:`gpuyard.services.interactive.Interactive.resolved`)."""
        """Pins each submitted job's image to its digest (a call to the pool's registry)."""
        self.clock = clock
        self.notify = notify
        self.on_delete = on_delete
        self.accounts = accounts or AccountService(store, clock=clock, notify=notify)
        self.policy = policy or self.accounts.policy
        self.audit = self.policy.audit
        self.admission = Admission(store, accounts=self.accounts, clock=clock)
        self._intake = GroupCommit(
            store,
            self._write_submissions,
            size=lambda part: len(part.specs),
            after=self._notify_all,
            name="submissions",
        )

    # -- create ---------------------------------------------------------------------------

    def check_submission(self, spec: JobSpec, *, owner: str) -> None:
        """Raise what :meth:`submit` would refuse ``spec`` with, storing nothing (dry runs)."""
        (spec,) = self.resolve([spec], owner=owner)
        self._check_spec(spec, owner)
        self.policy.check_access_choice(spec.access)
        with self.store.read() as session:
            user = session.get(UserRow, owner)
            group = (user.group_name or "") if user is not None else DEFAULT_GROUP
            self.accounts.check_urgent_limit(session, group, spec.priority, lock=False)

    def submit(self, spec: JobSpec, *, owner: str) -> JobView:
        """Queue a job for ``owner``. Refused, with nothing stored: a tier the owner may not
        use (403), node names or a pool that do not exist or a job that can never fit (422),
        the owner's group at its urgent limit (409)."""
        return self.submit_many([spec], owner=owner)[0]

    def submit_many(self, specs: Sequence[JobSpec], *, owner: str) -> list[JobView]:
        """Queue several jobs for ``owner``, all or none: the first that would be refused
        refuses the whole batch (its error names its index), and nothing is stored. Jobs are
        queued in the given order."""
        return self.enqueue(specs, owner=owner).result()

    def enqueue(self, specs: Sequence[JobSpec], *, owner: str) -> Future[list[JobView]]:
        """:meth:`submit_many` without waiting: the future has the jobs once they are stored
        (an event loop awaits it). Submissions that arrive together are checked and written
        in one transaction (:class:`~gpuyard.store.group_commit.GroupCommit`). A job with
        an image asks the registry for its digest first: the caller of an event loop calls
        this in a thread for such jobs (:func:`~gpuyard.services.images.needs_registry`)."""
        if not specs:
            raise InvalidSpec("no jobs to submit: give at least one")
        if len(specs) > MAX_BATCH:
            raise InvalidSpec(
                f"{len(specs)} jobs in one request; submit at most {MAX_BATCH} at a time"
            )
        specs = self.resolve(self.images.pinned(specs, owner=owner), owner=owner)
        return self._intake.submit(_Submission(tuple(specs), owner, self.clock.now()))

    def _notify_all(self) -> None:
        self.notify()  # looked up at each call: tests and the server may set it later

    def _admit(self, part: _Submission) -> None:
        """Raise what ``part`` is refused for before anything is written."""
        for i, spec in enumerate(part.specs):
            try:
                self._check_spec(spec, part.owner)
                self.policy.check_access_choice(spec.access)
            except GpuyardError as exc:
                if len(part.specs) == 1:
                    raise
                raise type(exc)(f"jobs[{i}]: {exc.detail}", extra=exc.extra) from None

    def _check_spec(self, spec: JobSpec, owner: str) -> None:
        self.admission.check(spec, owner)
        if self.program_check is not None:
            self.program_check(spec, owner)

    def _check_dependencies(self, session: Session, part: _Submission) -> None:
        """Each job waited for exists and its owner may see it."""
        wanted = sorted({d.job for spec in part.specs for d in spec.after})
        for job_id in wanted:
            try:
                self.policy.check_job(
                    session, part.owner, session.get(JobRow, job_id), job_id, Action.VIEW
                )
            except (NotFound, PermissionDenied):
                raise InvalidSpec(
                    f"after: job {job_id} does not exist, or you may not see it; a job can "
                    "wait only for jobs you can see (gpuyard ls)"
                ) from None

    def _write_submissions(
        self, session: Session, parts: Sequence[_Submission]
    ) -> list[list[JobView] | BaseException]:
        """Insert every accepted part's jobs and their first events in one go (the
        :class:`GroupCommit` of :meth:`submit_many`)."""
        results: list[list[JobView] | BaseException] = []
        admitted: list[tuple[int, _Submission]] = []
        for part in parts:
            try:
                self._admit(part)
                _check_arrays(session, part)
                self._check_dependencies(session, part)
            except GpuyardError as exc:
                results.append(exc)
            else:
                admitted.append((len(results), part))
                results.append([])
        if not admitted:
            return results
        groups = self.accounts.register_all(session, {p.owner for _, p in admitted})
        urgent: Counter[str] = Counter()
        accepted: list[tuple[int, _Submission]] = []
        for index, part in admitted:
            group = groups[part.owner]
            asks = sum(1 for spec in part.specs if spec.priority is self.accounts.urgent_tier)
            if asks:
                try:
                    self.accounts.check_urgent_limit(
                        session, group, self.accounts.urgent_tier, adding=urgent[group] + asks
                    )
                except Conflict as exc:
                    results[index] = exc
                    continue
                urgent[group] += asks
            accepted.append((index, part))
        group_ids = self._group_ids(session, {groups[part.owner] for _, part in accepted})
        values = [
            _job_values(spec, part.owner, groups[part.owner], part.at)
            | {"group_id": group_ids.get(groups[part.owner])}
            for _, part in accepted
            for spec in part.specs
        ]
        if not values:
            return results
        # Core statements on the session's connection: the ORM's bulk path costs more than
        # the rows it writes (none of these rows is cached, so the store need not count them).
        connection = session.connection()
        ids = list(connection.execute(_INSERT_JOBS, values).scalars())
        connection.execute(_SET_SEQ, {"first": min(ids), "last": max(ids)})
        connection.execute(
            _INSERT_EVENTS,
            [
                {
                    "job_id": job_id,
                    "time": row["created_at"],
                    "kind": EventKind.SUBMITTED,
                    "actor": Actor.user(row["owner"]),
                    "from_state": None,
                    "to_state": JobState.QUEUED,
                    "reason": "submitted",
                    "node": None,
                    "attempt": 0,
                }
                for job_id, row in zip(ids, values, strict=True)
            ],
        )
        made = iter(zip(ids, values, strict=True))
        for index, part in accepted:
            results[index] = [queued_view(*next(made), spec=spec) for spec in part.specs]
        return results

    def clone(self, job_id: int, *, actor: str, overrides: dict[str, Any] | None) -> JobView:
        with self.store.read() as session:
            source = self.policy.check_job(
                session, actor, session.get(JobRow, job_id), job_id, Action.CLONE
            )
            caller = self.policy.caller(session, actor)
            data = dict(source.spec)
        if "env" in data and caller.name != source.owner:
            # Another's clone leaves the owner's env out: from the CLI it is the owner's shell,
            # secrets included (docs/jobs.md); the clone's --env sets what it needs.
            data["env"] = {}
        if not self.policy.sharing():
            data["access"] = "none"  # what the source gave others is not open any more
        data.update(overrides or {})
        if not (overrides or {}).get("name"):
            data["name"] = source.name
        try:
            spec = JobSpec.model_validate(data)
        except ValidationError as exc:
            raise InvalidSpec(
                f"the cloned spec is invalid: {readable_validation_errors(exc.errors())}"
            ) from None
        return self.submit(spec, owner=actor)

    # -- read -----------------------------------------------------------------------------

    def get(self, job_id: int, *, actor: str) -> JobView:
        with self.store.read() as session:
            row = self._may(session, actor, job_id, Action.VIEW)
            workers = session.scalars(
                select(WorkerRow)
                .where(WorkerRow.job_id == job_id, WorkerRow.attempt == row.attempt)
                .order_by(WorkerRow.rank)
            ).all()
            caller = self.policy.caller(session, actor)
            allowed = self.policy.allowed(caller, row, sharing=self.policy.sharing(session))
            return _disclosed(
                session,
                Viewer.of(session, self.policy, actor),
                job_view(row, list(workers), allowed=allowed),
            )

    def list_jobs(self, wanted: JobQuery, *, actor: str) -> Page[JobView]:
        """The jobs ``wanted`` matches that ``actor`` may see, newest first."""
        check_page(wanted, MAX_PAGE)
        query = filtered(select(JobRow), wanted)
        with self.store.read() as session:
            caller = self.policy.caller(session, actor)
            sharing = self.policy.sharing(session)
            visible = self.policy.visible(caller, sharing=sharing)
            if visible is not None:
                query = query.where(visible)
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(
                query.order_by(*ordering(wanted)).offset(wanted.offset).limit(wanted.limit)
            ).all()
            viewer = Viewer(caller, sharing)
            items = [
                _disclosed(
                    session,
                    viewer,
                    job_view(r, allowed=self.policy.allowed(caller, r, sharing=sharing)),
                )
                for r in rows
            ]
        return Page[JobView](items=items, total=total, offset=wanted.offset, limit=wanted.limit)

    def events(
        self, job_id: int, *, actor: str, after: int = 0, limit: int = MAX_PAGE
    ) -> list[JobEvent]:
        with self.store.read() as session:
            self._may(session, actor, job_id, Action.VIEW)
            rows = session.scalars(
                select(EventRow)
                .where(EventRow.job_id == job_id, EventRow.id > after)
                .order_by(EventRow.id)
                .limit(min(limit, MAX_PAGE))
            ).all()
            viewer = Viewer.of(session, self.policy, actor)
            return [
                event.model_copy(update={"reason": viewer.redact(session, event.reason)})
                if event.reason
                else event
                for event in map(event_view, rows)
            ]

    def faults(self, job_id: int, *, actor: str) -> list[FaultEntry]:
        """The job's fault-tolerance log, oldest first."""
        with self.store.read() as session:
            self._may(session, actor, job_id, Action.VIEW)
            rows = session.scalars(
                select(FaultRow)
                .where(FaultRow.job_id == job_id)
                .order_by(FaultRow.id)
                .limit(MAX_PAGE)
            ).all()
            return [
                FaultEntry(
                    id=r.id,
                    attempt=r.attempt,
                    time=datetime.fromtimestamp(r.at, UTC),
                    kind=r.kind,
                    cause=r.cause,
                    suspect=r.suspect,
                    rank=r.rank,
                    node=r.node,
                    evidence=r.evidence,
                    action=r.action,
                    outcome=r.outcome,
                    outcome_time=(
                        datetime.fromtimestamp(r.outcome_at, UTC)
                        if r.outcome_at is not None
                        else None
                    ),
                    actor=r.actor,
                )
                for r in rows
            ]

    # -- change ---------------------------------------------------------------------------

    def stop(self, job_id: int, *, actor: str) -> JobView:
        now = self.clock.now()
        with self.store.write() as session:
            row = self._may(session, actor, job_id, Action.STOP)
            target = _stop_target(row, actor)
            self.audit.record(session, Actor.user(actor), "job.stop", f"job:{job_id}")
            if target is None:  # already stopping: stopping twice is not an error
                return self._shown(session, actor, row)
            _stop_row(session, row, target, actor=actor, now=now)
            view = self._shown(session, actor, row)
        self.notify(job_id)
        return view

    def signal(self, job_id: int, signum: int, *, steps: bool, actor: str) -> JobView:
        """Send a signal to a running job's steps or batch shell (``scancel --signal``): whoever
        may stop it. The controller delivers it on its next pass."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self._may(session, actor, job_id, Action.STOP)
            state = JobState(row.state)
            if state is not JobState.RUNNING:
                raise Conflict(
                    f"job {job_id} is {state.value}; only a running job can be signalled",
                    extra={"state": state.value},
                )
            session.add(
                SignalRow(job_id=job_id, signal=signum, steps=steps, actor=actor, created_at=now)
            )
            self.audit.record(
                session,
                Actor.user(actor),
                "job.signal",
                f"job:{job_id}",
                f"signal {signum} to the {'steps' if steps else 'batch shell'}",
            )
            view = self._shown(session, actor, row)
        self.notify(job_id)
        return view

    def hold(self, job_id: int, *, actor: str, held: bool = True) -> JobView:
        """Hold a waiting or suspending job (it does not start until released) or release it:
        whoever may stop it (:func:`~gpuyard.services.suspension.set_held`)."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self._may(session, actor, job_id, Action.STOP)
            set_held(session, row, actor=actor, held=held, now=now, audit=self.audit)
            view = self._shown(session, actor, row)
        self.notify(job_id)
        return view

    def hold_many(self, job_ids: Sequence[int], *, actor: str, held: bool) -> BulkResult:
        """Hold or release each job (as :meth:`hold`), in one transaction; a job that cannot
        be (gone, not waiting, not the actor's to stop) is reported and the others are done.
        ``scontrol release 12,13,...`` releases a whole queue at once this way."""
        ids = _unique(job_ids)
        now = self.clock.now()
        result = BulkResult()
        with self.store.write() as session:
            for row in self._each_allowed(session, actor, ids, Action.STOP, result.failed):
                try:
                    set_held(session, row, actor=actor, held=held, now=now, audit=self.audit)
                except Conflict as exc:
                    result.failed.append(_refusal(row.id, exc))
                    continue
                result.states[row.id] = row.state
        result.done = [job_id for job_id in ids if job_id in result.states]
        if result.done:
            self.notify()
        return result

    def change_priority(self, job_id: int, priority: Priority, *, actor: str) -> JobView:
        """Move a queued or suspended job to another tier (docs/jobs.md, "Changing…"): its
        owner or an admin, within the tiers the actor may use and the group's urgent limit.
        The state stays; the version goes up, so a scheduling decision made on the old tier
        is dropped."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self._may(session, actor, job_id, Action.CHANGE_PRIORITY)
            state = JobState(row.state)
            if state not in PENDING:
                raise Conflict(
                    f"job {job_id} is {state.value}; only a queued or suspended job's priority "
                    f"can change (clone it with another priority: `gpuyard clone {job_id}`)",
                    extra={"state": state.value},
                )
            old = Priority(row.priority)
            if old is priority:
                return self._shown(session, actor, row)
            self.accounts.check_tier(session, actor, priority)
            group = row.group_name or self._group_of(session, row.owner)
            self.accounts.check_urgent_limit(session, group, priority)
            guarded_update(
                session, row, priority=priority, spec={**row.spec, "priority": priority.value}
            )
            self.audit.record(
                session,
                Actor.user(actor),
                "job.priority",
                f"job:{job_id}",
                f"{old.value} -> {priority.value}",
            )
            record_event(
                session,
                row,
                kind=EventKind.PRIORITY,
                actor=Actor.user(actor),
                reason=f"priority {old.value} -> {priority.value}",
                time=now,
            )
            view = self._shown(session, actor, row)
        self.notify(job_id)
        return view

    def change_runtime(self, job_id: int, max_runtime: float, *, actor: str) -> JobView:
        """Set a job's runtime limit (docs/jobs.md, "Changing…"), counted from its start: any
        job that has not ended. A running job past the new limit expires at the next pass."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self._may(session, actor, job_id, Action.CHANGE_RUNTIME)
            state = JobState(row.state)
            if state.is_terminal():
                raise Conflict(
                    f"job {job_id} has already ended ({state.status.label}); its runtime "
                    "cannot change",
                    extra={"state": state.value},
                )
            old = row.max_runtime
            if old == max_runtime:
                return self._shown(session, actor, row)
            guarded_update(
                session,
                row,
                max_runtime=max_runtime,
                spec={**row.spec, "max_runtime": max_runtime},
            )
            was = "no limit" if old is None else format_duration(old)
            change = f"max runtime {was} -> {format_duration(max_runtime)}"
            record_event(
                session,
                row,
                kind=EventKind.RUNTIME,
                actor=Actor.user(actor),
                reason=change,
                time=now,
            )
            self.audit.record(session, Actor.user(actor), "job.runtime", f"job:{job_id}", change)
            view = self._shown(session, actor, row)
        self.notify(job_id)
        return view

    def _shown(self, session: Session, actor: str, row: JobRow) -> JobView:
        """``row`` as ``actor`` may read it (:func:`_disclosed`): an action's answer shows no
        more than a read of the job would (a group member who may stop it reads no env values)."""
        return _disclosed(session, Viewer.of(session, self.policy, actor), job_view(row))

    @staticmethod
    def _group_ids(session: Session, names: set[str]) -> dict[str, int]:
        """The ids of the groups of these names now: what the new jobs' access refers to."""
        query = select(GroupRow.name, GroupRow.id).where(GroupRow.name.in_(names))
        return dict(session.execute(query).all())

    @staticmethod
    def _group_of(session: Session, user: str) -> str:
        row = session.get(UserRow, user)
        return (row.group_name or "") if row is not None else ""

    def delete(self, job_id: int, *, actor: str) -> None:
        with self.store.write() as session:
            row = self._may(session, actor, job_id, Action.DELETE)
            _check_deletable(row)
            self.audit.record(
                session,
                Actor.user(actor),
                "job.delete",
                f"job:{job_id}",
                f"{row.name} of {row.owner}",
            )
            session.delete(row)
        self.on_delete(job_id)

    # -- many at once ---------------------------------------------------------------------

    def stop_many(self, job_ids: Sequence[int], *, actor: str) -> BulkResult:
        """Stop each job (as :meth:`stop`), in one transaction; a job that cannot be stopped
        (gone, already ended) is reported, not raised, and the others are stopped. Queued
        jobs are stopped with one statement: a thousand of them take milliseconds."""
        ids = _unique(job_ids)
        now = self.clock.now()
        result = BulkResult()
        draining: list[int] = []
        with self.store.write() as session:
            pending: list[JobRow] = []
            for row in self._each_allowed(session, actor, ids, Action.STOP, result.failed):
                try:
                    target = _stop_target(row, actor)
                except Conflict as exc:
                    result.failed.append(_refusal(row.id, exc))
                    continue
                if target is not None and row.state in PENDING:
                    pending.append(row)  # stopped together below, by one statement
                    continue
                if target is not None:
                    _stop_row(session, row, target, actor=actor, now=now)
                    draining.append(row.id)
                result.states[row.id] = row.state
            self._stop_pending(session, pending, actor=actor, now=now)
            result.states.update((row.id, JobState.STOPPED) for row in pending)
            self.audit.record_many(
                session, Actor.user(actor), "job.stop", [f"job:{i}" for i in result.states]
            )
        result.done = [job_id for job_id in ids if job_id in result.states]  # as asked
        for job_id in draining:
            self.notify(job_id)
        if pending:
            self.notify()
        return result

    def _stop_pending(
        self, session: Session, rows: Sequence[JobRow], *, actor: str, now: float
    ) -> None:
        """queued / suspended -> stopped for every row, as two statements (the rows are locked
        by the caller's read, so each guard holds)."""
        if not rows:
            return
        for row in rows:
            check_transition(row.id, row.state, JobState.STOPPED)
        connection = session.connection()
        connection.execute(
            _STOP,
            [
                {
                    "job": row.id,
                    "seen": row.version,
                    "next": row.version + 1,
                    "why": f"stopped by {actor}",
                    "at": now,
                }
                for row in rows
            ],
        )
        connection.execute(
            _INSERT_EVENTS,
            [
                {
                    "job_id": row.id,
                    "time": now,
                    "kind": EventKind.TRANSITION,
                    "actor": Actor.user(actor),
                    "from_state": row.state,
                    "to_state": JobState.STOPPED,
                    "reason": f"stop requested by {actor}",
                    "node": None,
                    "attempt": row.attempt,
                }
                for row in rows
            ],
        )

    def delete_many(self, job_ids: Sequence[int], *, actor: str) -> BulkResult:
        """Delete each ended job with its events, workers and files; a job that is not there
        or has not ended is reported, not raised, and the others are deleted."""
        ids = _unique(job_ids)
        result = BulkResult()
        with self.store.write() as session:
            for row in self._each_allowed(session, actor, ids, Action.DELETE, result.failed):
                try:
                    _check_deletable(row)
                except Conflict as exc:
                    result.failed.append(_refusal(row.id, exc))
                else:
                    result.done.append(row.id)
            self.audit.record_many(
                session, Actor.user(actor), "job.delete", [f"job:{i}" for i in result.done]
            )
            for chunk in range(0, len(result.done), 500):
                session.execute(
                    delete(JobRow).where(JobRow.id.in_(result.done[chunk : chunk + 500]))
                )
        for job_id in result.done:
            self.on_delete(job_id)
        return result

    def _may(self, session: Session, actor: str, job_id: int, action: Action) -> JobRow:
        return self.policy.check_job(session, actor, session.get(JobRow, job_id), job_id, action)

    def _each_allowed(
        self,
        session: Session,
        actor: str,
        ids: Sequence[int],
        action: Action,
        failed: list[JobFailure],
    ) -> Iterator[JobRow]:
        """The rows of ``ids`` that ``actor`` may do ``action`` to, locked, in the order of
        ``ids``; each job refused or missing goes to ``failed`` in its place instead."""
        rows = self._rows_for_update(session, ids)
        refused = self._refused(session, actor, rows, action)
        for job_id in ids:
            row = rows.get(job_id)
            if job_id in refused:
                failed.append(refused[job_id])
            elif row is None:
                failed.append(_missing(job_id))
            else:
                yield row

    def _refused(
        self, session: Session, actor: str, rows: dict[int, JobRow], action: Action
    ) -> dict[int, JobFailure]:
        """The jobs of ``rows`` that ``actor`` may not do ``action`` to, each with what
        :meth:`Policy.check_job` answers for it alone (a hidden one: as if it did not exist)."""
        refused = {}
        for job_id, row in rows.items():
            try:
                self.policy.check_job(session, actor, row, job_id, action)
            except GpuyardError as exc:
                refused[job_id] = JobFailure(id=job_id, detail=exc.detail, code=exc.code)
        return refused

    @staticmethod
    def _rows_for_update(session: Session, ids: Sequence[int]) -> dict[int, JobRow]:
        """The rows of ``ids`` that exist, locked until the transaction ends."""
        rows: dict[int, JobRow] = {}
        for chunk in range(0, len(ids), 500):
            query = select(JobRow).where(JobRow.id.in_(ids[chunk : chunk + 500]))
            rows.update((r.id, r) for r in session.scalars(query.with_for_update()))
        return rows

    @staticmethod
    def _job(session: Any, job_id: int) -> JobRow:
        row: JobRow | None = session.get(JobRow, job_id)
        if row is None:
            raise NotFound(f"job {job_id} does not exist")
        return row


_JOBS = cast("Table", JobRow.__table__)
_INSERT_JOBS = insert(_JOBS).returning(_JOBS.c.id, sort_by_parameter_order=True)
_SET_SEQ = (
    update(_JOBS)
    .where(_JOBS.c.id.between(bindparam("first"), bindparam("last")), _JOBS.c.seq.is_(None))
    .values(seq=_JOBS.c.id)
)
"""A queued job's place in the queue is its id, kept across suspensions."""
_INSERT_EVENTS = insert(cast("Table", EventRow.__table__))


_STOP = (
    update(_JOBS)
    .where(_JOBS.c.id == bindparam("job"), _JOBS.c.version == bindparam("seen"))
    .values(
        state=JobState.STOPPED,
        version=bindparam("next"),
        reason=bindparam("why"),
        finished_at=bindparam("at"),
        wait_code=None,
        start_at=None,
    )
)


def _unique(job_ids: Sequence[int]) -> list[int]:
    ids = list(dict.fromkeys(job_ids))
    if not ids:
        raise InvalidSpec("no job ids given")
    if len(ids) > MAX_BATCH:
        raise InvalidSpec(f"{len(ids)} job ids in one request; give at most {MAX_BATCH}")
    return ids


def _stop_target(row: JobRow, actor: str) -> tuple[JobState, str] | None:
    """The stop rule, for :meth:`JobService.stop` and :meth:`JobService.stop_many`: where
    stopping ``row`` sends it, with the reason it will show; None when it is already stopping
    (stopping twice is not an error). An ended job raises :class:`Conflict`."""
    state = JobState(row.state)
    if state.is_terminal():
        raise Conflict(f"job {row.id} has already ended ({state.status.label}); nothing to stop")
    if state is JobState.STOPPING:
        return None
    if state in HELD_STATES:
        return stop_held(row, actor)
    return (JobState.STOPPED if state in PENDING else JobState.STOPPING), f"stopped by {actor}"


def _stop_row(
    session: Session, row: JobRow, target: tuple[JobState, str], *, actor: str, now: float
) -> None:
    """Move ``row`` where :func:`_stop_target` said, with its event."""
    state, reason = target
    transition(
        session,
        row,
        state,
        actor=Actor.user(actor),
        why=f"stop requested by {actor}",
        time=now,
        reason=reason,
    )


def _check_deletable(row: JobRow) -> None:
    """The delete rule: only an ended job is deleted (its files and events go with it)."""
    state = JobState(row.state)
    if not state.is_terminal():
        raise Conflict(
            f"job {row.id} is {state.status.label}; stop it first "
            f"(`gpuyard stop {row.id}`), then delete it"
        )


def _refusal(job_id: int, exc: Conflict) -> JobFailure:
    """A bulk action's entry for a job one of the per-row rules refused."""
    return JobFailure(id=job_id, detail=exc.detail, code=Conflict.code)


def _missing(job_id: int) -> JobFailure:
    return JobFailure(id=job_id, detail=f"job {job_id} does not exist", code=NotFound.code)


@dataclass(frozen=True)
class _Submission:
    specs: tuple[JobSpec, ...]
    owner: str
    at: float


def _check_arrays(session: Session, part: _Submission) -> None:
    """A Slurm array task joins an array its owner submitted (sbatch --array submits the first
    task, then the others naming it): not anyone else's job, nor a job that is no array."""
    heads = {
        spec.slurm.array.job_id
        for spec in part.specs
        if spec.slurm is not None and spec.slurm.array is not None and spec.slurm.array.job_id
    }
    for head in sorted(heads):
        row = session.get(JobRow, head)
        spec = row.loaded_spec() if row is not None else None
        array = spec.slurm.array if spec is not None and spec.slurm is not None else None
        if row is None or row.owner != part.owner or array is None or array.job_id is not None:
            raise InvalidSpec(
                f"slurm.array.job_id: job {head} is not the first task of a job array of "
                f"{part.owner}'s; an array task joins its own owner's array"
            )


def _job_values(spec: JobSpec, owner: str, group: str, now: float) -> dict[str, Any]:
    """The columns of a newly queued job."""
    return {
        "name": spec.effective_name(),
        "owner": owner,
        "state": JobState.QUEUED,
        "version": 0,
        "priority": spec.priority.value,
        "access": spec.access.value,
        "spec": spec.model_dump(mode="json"),
        "attempt": 0,
        "created_at": now,
        "group_name": group,
        "suspensions": 0,
        "attained": 0.0,
        "ran": 0.0,
        "listens": False,
        "array_id": (
            spec.slurm.array.job_id if spec.slurm is not None and spec.slurm.array else None
        ),
        "array_throttle": (
            spec.slurm.array.throttle if spec.slurm is not None and spec.slurm.array else None
        ),
        "begin_at": spec.slurm.begin if spec.slurm is not None else None,
        # Without a time limit it waits: one set later (gpuyard runtime) makes it due.
        "limit_signal": (
            spec.slurm.signal.seconds if spec.slurm is not None and spec.slurm.signal else None
        ),
        "held": spec.hold,
        "depends": [[d.job, d.when.value] for d in spec.after] or None,
        "restarts": 0,
        "check_failures": 0,
        "check_next": False,
        "resume": True,
        "hang_timeout": (
            spec.fault_tolerance.hang_timeout
            if spec.fault_tolerance is not None and spec.fault_tolerance.enabled
            else None
        ),
        "perf_window": (
            spec.fault_tolerance.performance.window
            if spec.fault_tolerance is not None
            and spec.fault_tolerance.enabled
            and spec.fault_tolerance.performance is not None
            else None
        ),
        "image_digest": pinned_digest(spec.image),
        **request_columns(request_of(spec)),
    }


def _disclosed(session: Session, viewer: Viewer, view: JobView) -> JobView:
    """``view`` with its reason naming only the jobs ``viewer`` may see ("suspended to make
    room for job 7" names another user's job), and its env's values only for its owner and
    admins (:func:`env_for`)."""
    update: dict[str, Any] = {}
    if view.reason and (reason := viewer.redact(session, view.reason)) != view.reason:
        update["reason"] = reason
    if view.spec is not None and view.spec.env:
        env = env_for(viewer.caller, view.owner, view.spec.env)
        if env is not view.spec.env:
            update["spec"] = view.spec.model_copy(update={"env": env})
    return view.model_copy(update=update) if update else view
