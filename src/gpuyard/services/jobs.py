"""Job rules: submit, list, show, stop, delete, clone, events.

Routers call one function here; everything that decides something about a job lives here or in
:mod:`gpuyard.services.transitions`. Bad input raises :class:`InvalidSpec` before
anything is written, so a rejected submission stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import Conflict, InvalidSpec, NotFound, PermissionDenied
from gpuyard.models import (
    JobEvent,
    JobSpec,
    JobState,
    JobStatus,
    JobView,
    NodeState,
    Page,
    Priority,
    Role,
)
from gpuyard.models.request import DEFAULT_POOL, Constraint, request_of
from gpuyard.models.states import PENDING
from gpuyard.models.validation import readable_validation_errors
from gpuyard.scheduler.placement import Ledger
from gpuyard.scheduler.snapshot import NodeCapacity
from gpuyard.services.accounts import DEFAULT_GROUP, AccountService
from gpuyard.services.notify import Notify, nobody
from gpuyard.services.transitions import record_event, transition
from gpuyard.services.views import event_view, job_view
from gpuyard.store.engine import Store
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import (
    EventRow,
    JobRow,
    NodeRow,
    PoolRow,
    UserRow,
    WorkerRow,
    request_columns,
)

__all__ = ["JobService"]

MAX_PAGE = 1000


class JobService:
    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        notify: Notify = nobody,
        on_delete: Callable[[int], None] = lambda _job_id: None,
        accounts: AccountService | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.notify = notify
        self.on_delete = on_delete
        self.accounts = accounts or AccountService(store, clock=clock, notify=notify)

    # -- create ---------------------------------------------------------------------------

    def check_submission(self, spec: JobSpec, *, owner: str) -> None:
        """Raise what :meth:`submit` would refuse ``spec`` with, storing nothing (dry runs)."""
        with self.store.read() as session:
            self.accounts.check_tier(session, owner, spec.priority)
            self._check_placement(session, spec)
            user = session.get(UserRow, owner)
            group = (user.group_name or "") if user is not None else DEFAULT_GROUP
            self.accounts.check_urgent_limit(session, group, spec.priority, lock=False)

    def submit(self, spec: JobSpec, *, owner: str) -> JobView:
        """Queue a job for ``owner``. Refused, with nothing stored: a tier the owner may not
        use (403), node names or a pool that do not exist or a job that can never fit (422),
        the owner's group at its urgent limit (409)."""
        with self.store.read() as session:
            self.accounts.check_tier(session, owner, spec.priority)
            self._check_placement(session, spec)
        now = self.clock.now()
        with self.store.write() as session:
            user = self.accounts.register(session, owner)
            group = user.group_name or ""
            self.accounts.check_urgent_limit(session, group, spec.priority)
            row = JobRow(
                name=spec.effective_name(),
                owner=owner,
                state=JobState.QUEUED,
                version=0,
                priority=spec.priority.value,
                spec=spec.model_dump(mode="json"),
                attempt=0,
                created_at=now,
                group_name=group,
                **request_columns(request_of(spec)),
            )
            session.add(row)
            session.flush()
            row.seq = row.id  # its place in the queue, kept across suspensions
            record_event(
                session,
                row,
                kind="submitted",
                actor=f"user:{owner}",
                reason="submitted",
                time=now,
                to_state=JobState.QUEUED,
            )
            session.flush()
            view = job_view(row)
        self.notify()
        return view

    def clone(self, job_id: int, *, actor: str, overrides: dict[str, Any] | None) -> JobView:
        with self.store.read() as session:
            source = self._job(session, job_id)
            data = dict(source.spec)
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

    def _check_placement(self, session: Session, spec: JobSpec) -> None:
        """InvalidSpec unless the job's node names, pool and shape could ever be placed.

        Checked against the ready nodes the job may use. With no node registered at all (the
        pool is starting), or when all the job's nodes are cordoned for now, it is accepted
        and waits with a reason."""
        nodes = {n.name: n for n in session.scalars(select(NodeRow).order_by(NodeRow.name))}
        constraint = self._constraint(session, spec, nodes)
        present = [n for n in nodes.values() if n.state is not NodeState.GONE]
        if not present:
            return
        usable = [n for n in present if constraint.allows(n.name, n.effective_labels())]
        if not usable:
            raise InvalidSpec(_no_nodes_for(constraint, present))
        ready = [n for n in usable if n.state is NodeState.READY]
        if not ready:
            return
        capacities = [
            NodeCapacity(r.name, r.gpus, r.cpus, r.memory, labels=r.effective_labels())
            for r in ready
        ]
        policy = session.get(PoolRow, constraint.pool)
        same_zone = bool(policy is not None and policy.same_zone)
        ledger = Ledger(capacities, running=())
        reasons = []
        for choice in request_of(spec).choices():
            never = ledger.could_ever_fit(choice, constraint, same_zone=same_zone)
            if never is None:
                return
            reasons.append(never)
        raise InvalidSpec(
            f"this job can never run in this pool: {'; '.join(dict.fromkeys(reasons))}. "
            "Ask for fewer GPUs, CPUs, memory or nodes (see `gpuyard nodes`)."
        )

    def _constraint(self, session: Session, spec: JobSpec, nodes: dict[str, NodeRow]) -> Constraint:
        """Where the job may run, as the scheduler reads it; InvalidSpec for names that do not
        exist, and for node names in several pools."""
        if spec.node_names:
            missing = [n for n in dict.fromkeys(spec.node_names) if n not in nodes]
            if missing:
                known = list(nodes)
                shown = ", ".join(known[:20]) + (", …" if len(known) > 20 else "")
                raise InvalidSpec(
                    f"node_names: there is no node {', '.join(missing)} (nodes: "
                    f"{shown or 'none yet'}; see `gpuyard nodes`)"
                )
            pools: dict[str, list[str]] = {}
            for name in dict.fromkeys(spec.node_names):
                pool = nodes[name].effective_labels().get("pool") or DEFAULT_POOL
                pools.setdefault(pool, []).append(name)
            if len(pools) > 1:
                where = "; ".join(f"{', '.join(ns)} in pool {p}" for p, ns in sorted(pools.items()))
                raise InvalidSpec(
                    f"node_names: a job's nodes must all be in one pool, and these are not "
                    f"({where}); name nodes of one pool"
                )
            return Constraint(next(iter(pools)), frozenset(spec.node_names))
        if spec.pool:
            pools_known = self.accounts.pool_names(session)
            if spec.pool not in pools_known:
                raise InvalidSpec(
                    f"pool: there is no pool {spec.pool} (pools: "
                    f"{', '.join(sorted(pools_known))}; "
                    "see `gpuyard pools`)"
                )
            return Constraint(spec.pool)
        return Constraint(DEFAULT_POOL, driver=spec.driver_version)

    # -- read -----------------------------------------------------------------------------

    def get(self, job_id: int) -> JobView:
        with self.store.read() as session:
            row = self._job(session, job_id)
            workers = session.scalars(
                select(WorkerRow)
                .where(WorkerRow.job_id == job_id, WorkerRow.attempt == row.attempt)
                .order_by(WorkerRow.rank)
            ).all()
            return job_view(row, list(workers))

    def list_jobs(
        self,
        *,
        statuses: Sequence[JobStatus] = (),
        name: str | None = None,
        owner: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> Page[JobView]:
        if offset < 0 or not 1 <= limit <= MAX_PAGE:
            raise InvalidSpec(f"offset must be >= 0 and limit between 1 and {MAX_PAGE}")
        query = select(JobRow)
        if statuses:
            states = sorted({s.value for st in statuses for s in JobState.for_status(st)})
            query = query.where(JobRow.state.in_(states))
        if name:
            query = query.where(JobRow.name.contains(name, autoescape=True))
        if owner:
            query = query.where(JobRow.owner == owner)
        with self.store.read() as session:
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(
                query.order_by(JobRow.id.desc()).offset(offset).limit(limit)
            ).all()
            items = [job_view(r) for r in rows]
        return Page[JobView](items=items, total=total, offset=offset, limit=limit)

    def events(self, job_id: int, *, after: int = 0, limit: int = 1000) -> list[JobEvent]:
        with self.store.read() as session:
            self._job(session, job_id)
            rows = session.scalars(
                select(EventRow)
                .where(EventRow.job_id == job_id, EventRow.id > after)
                .order_by(EventRow.id)
                .limit(min(limit, MAX_PAGE))
            ).all()
            return [event_view(r) for r in rows]

    # -- change ---------------------------------------------------------------------------

    def stop(self, job_id: int, *, actor: str) -> JobView:
        now = self.clock.now()
        with self.store.write() as session:
            row = self._job(session, job_id)
            state = JobState(row.state)
            if state.is_terminal():
                raise Conflict(
                    f"job {job_id} has already ended ({state.status.label}); nothing to stop"
                )
            if state is JobState.STOPPING:
                return job_view(row)  # already stopping: stopping twice is not an error
            target = JobState.STOPPED if state in PENDING else JobState.STOPPING
            transition(
                session,
                row,
                target,
                actor=f"user:{actor}",
                why=f"stop requested by {actor}",
                time=now,
                reason=f"stopped by {actor}",
            )
            view = job_view(row)
        self.notify(job_id)
        return view

    def change_priority(self, job_id: int, priority: Priority, *, actor: str) -> JobView:
        """Move a queued or suspended job to another tier (reference 002's 调整优先级): its
        owner or an admin, within the tiers the actor may use and the group's urgent limit.
        The state stays; the version goes up, so a scheduling decision made on the old tier
        is dropped."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self._job(session, job_id)
            if row.owner != actor and self.accounts.role_of(session, actor) is not Role.ADMIN:
                raise PermissionDenied(
                    f"only job {job_id}'s owner ({row.owner}) or an admin may change its "
                    f"priority; you are {actor}"
                )
            state = JobState(row.state)
            if state not in PENDING:
                raise Conflict(
                    f"job {job_id} is {state.value}; only a queued or suspended job's priority "
                    f"can change (clone it with another priority: `gpuyard clone {job_id}`)",
                    extra={"state": state.value},
                )
            old = Priority(row.priority)
            if old is priority:
                return job_view(row)
            self.accounts.check_tier(session, actor, priority)
            group = row.group_name or self._group_of(session, row.owner)
            self.accounts.check_urgent_limit(session, group, priority)
            guarded_update(
                session, row, priority=priority, spec={**row.spec, "priority": priority.value}
            )
            record_event(
                session,
                row,
                kind="priority",
                actor=f"user:{actor}",
                reason=f"priority {old.value} -> {priority.value}",
                time=now,
            )
            view = job_view(row)
        self.notify(job_id)
        return view

    @staticmethod
    def _group_of(session: Session, user: str) -> str:
        row = session.get(UserRow, user)
        return (row.group_name or "") if row is not None else ""

    def delete(self, job_id: int, *, actor: str) -> None:
        with self.store.write() as session:
            row = self._job(session, job_id)
            state = JobState(row.state)
            if not state.is_terminal():
                raise Conflict(
                    f"job {job_id} is {state.status.label}; stop it first "
                    f"(`gpuyard stop {job_id}`), then delete it"
                )
            session.delete(row)
        self.on_delete(job_id)

    @staticmethod
    def _job(session: Any, job_id: int) -> JobRow:
        row: JobRow | None = session.get(JobRow, job_id)
        if row is None:
            raise NotFound(f"job {job_id} does not exist")
        return row


def _no_nodes_for(constraint: Constraint, nodes: list[NodeRow]) -> str:
    """Why no node matches, and what to do about it."""
    if constraint.nodes:
        return (
            f"node_names: {', '.join(sorted(constraint.nodes))} are gone (no executor presents "
            "them any more); name other nodes (see `gpuyard nodes`)"
        )
    if constraint.driver is not None:
        drivers = sorted(
            {
                d
                for n in nodes
                if (d := n.effective_labels().get("driver"))
                and Constraint(constraint.pool).allows(n.name, n.effective_labels())
            }
        )
        return (
            f"driver_version: no node of the {constraint.pool} pool has driver "
            f"{constraint.driver} (drivers: {', '.join(drivers) or 'none labelled'}); an admin "
            "labels nodes with `gpuyard label NODE driver=VERSION`"
        )
    if constraint.pool == DEFAULT_POOL:
        pools = sorted({n.effective_labels().get("pool") or DEFAULT_POOL for n in nodes})
        return (
            f"pool: every node is in a named pool ({', '.join(pools)}) and the default pool "
            "has none; name one with `pool` (--pool)"
        )
    return (
        f"pool: pool {constraint.pool} has no nodes yet; an admin adds some with `gpuyard "
        f"label NODE pool={constraint.pool}`"
    )
