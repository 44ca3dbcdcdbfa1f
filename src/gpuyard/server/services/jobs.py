"""Job rules: submit, list, show, stop, delete, clone, events.

Routers call one function here; everything that decides something about a job lives here or in
:mod:`gpuyard.server.services.transitions`. Bad input raises :class:`InvalidSpec` before
anything is written, so a rejected submission stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select

from gpuyard.clock import Clock
from gpuyard.errors import Conflict, InvalidSpec, NotFound
from gpuyard.launch.topology import request_of
from gpuyard.models import JobEvent, JobSpec, JobState, JobStatus, JobView, NodeState, Page
from gpuyard.scheduler.placement import Ledger
from gpuyard.scheduler.snapshot import NodeCapacity
from gpuyard.server.db.store import Store
from gpuyard.server.db.tables import EventRow, JobRow, NodeRow, WorkerRow
from gpuyard.server.services.transitions import record_event, transition
from gpuyard.server.services.views import event_view, job_view

__all__ = ["JobService"]

MAX_PAGE = 1000


class JobService:
    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        notify: Callable[[], None] = lambda: None,
        on_delete: Callable[[int], None] = lambda _job_id: None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.notify = notify
        self.on_delete = on_delete

    # -- create ---------------------------------------------------------------------------

    def submit(self, spec: JobSpec, *, owner: str) -> JobView:
        self._check_fits_pool(spec)
        now = self.clock.now()
        with self.store.write() as session:
            row = JobRow(
                name=spec.effective_name(),
                owner=owner,
                state=JobState.QUEUED.value,
                version=0,
                priority=spec.priority.value,
                spec=spec.model_dump(mode="json"),
                attempt=0,
                created_at=now,
            )
            session.add(row)
            session.flush()
            record_event(
                session,
                row,
                kind="submitted",
                actor=f"user:{owner}",
                reason="submitted",
                time=now,
                to_state=JobState.QUEUED.value,
            )
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
            raise InvalidSpec(f"the cloned spec is invalid: {exc}") from None
        return self.submit(spec, owner=actor)

    def _check_fits_pool(self, spec: JobSpec) -> None:
        with self.store.read() as session:
            rows = session.scalars(
                select(NodeRow).where(NodeRow.state == NodeState.READY.value)
            ).all()
        if not rows:
            return  # no nodes registered yet (the pool is starting); the job waits with a reason
        ledger = Ledger([NodeCapacity(r.name, r.gpus, r.cpus, r.memory) for r in rows], running=())
        never = ledger.could_ever_fit(request_of(spec))
        if never is not None:
            raise InvalidSpec(
                f"this job can never run in this pool: {never}. "
                "Ask for fewer GPUs, CPUs, memory or nodes (see `gpuyard nodes`)."
            )

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
            target = JobState.STOPPED if state is JobState.QUEUED else JobState.STOPPING
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
        self.notify()
        return view

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
