"""The job query in SQL, and the job list of the web UI: filters, search, sorting and paging.

:class:`~gpuyard.models.job_query.JobQuery` becomes WHERE clauses and an order here, once,
for the API's list (:meth:`gpuyard.services.jobs.JobService.list_jobs`) and the web's.

A page of a 10,000-job store must render in well under 300 ms, so nothing here reads every
row: the filters are WHERE clauses (the caller's visibility from :meth:`Policy.visible`
among them), the count is one ``COUNT(*)``, and only the page's rows are fetched, with only
the columns the list shows (not the spec, which is the largest column). What the caller may
do with each row is decided by the same table as the API's checks
(:func:`gpuyard.models.access.decide`), so the bulk buttons offer only what would be allowed;
the bulk actions themselves still go through :class:`~gpuyard.services.jobs.JobService`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, SQLColumnExpression, case, func, or_, select

from gpuyard.errors import InvalidSpec
from gpuyard.models import JobMode, JobState, JobStatus, Priority
from gpuyard.models.access import OFFERED_JOB_ACTIONS, Access, Action, Verdict, decide, relation_to
from gpuyard.models.holding import held_gpus, held_suffix
from gpuyard.models.job_query import MAX_WEB_PAGE, JobQuery, JobSort
from gpuyard.models.request import DEFAULT_POOL
from gpuyard.services.auth import Policy
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow

__all__ = ["JobSearch", "JobSummary", "SearchPage", "check_page", "filtered", "ordering"]


@dataclass(frozen=True)
class JobSummary:
    """One row of the list."""

    id: int
    name: str
    owner: str
    group: str
    state: JobState
    priority: str
    mode: str
    pool: str
    nodes: int
    gpus: int
    """Per node, as asked."""
    created_at: float
    started_at: float | None
    finished_at: float | None
    allowed: frozenset[Action] = frozenset()
    held_gpus: int | None = None
    """What its placement holds in all (:mod:`gpuyard.models.holding`); None unplaced."""

    @property
    def status(self) -> JobStatus:
        return self.state.status

    @property
    def gpus_text(self) -> str:
        """``nodes x gpus GPU``, and what it holds where that is more."""
        return f"{self.nodes}×{self.gpus} GPU" + held_suffix(self.nodes * self.gpus, self.held_gpus)


@dataclass(frozen=True)
class SearchPage:
    items: list[JobSummary]
    total: int
    offset: int
    limit: int
    can_stop: bool = False
    """Whether any job of the page may be stopped by the caller (to offer the bulk button)."""
    can_delete: bool = False


_MODE = JobRow.spec["mode"].as_string()
_PRIORITY_RANK = case({p.value: p.rank for p in Priority}, value=JobRow.priority, else_=-1)
_SORT_COLUMNS: dict[JobSort, SQLColumnExpression[Any]] = {
    JobSort.ID: JobRow.id,
    JobSort.NAME: JobRow.name,
    JobSort.OWNER: JobRow.owner,
    JobSort.STATE: JobRow.state,
    JobSort.PRIORITY: _PRIORITY_RANK,
    JobSort.CREATED: JobRow.created_at,
    JobSort.STARTED: JobRow.started_at,
}


class JobSearch:
    def __init__(self, store: Store, policy: Policy) -> None:
        self.store = store
        self.policy = policy

    def search(self, wanted: JobQuery, *, actor: str) -> SearchPage:
        check_page(wanted, MAX_WEB_PAGE)
        query = filtered(select(JobRow.id), wanted)
        with self.store.read() as session:
            caller = self.policy.caller(session, actor)
            sharing = self.policy.sharing(session)
            visible = self.policy.visible(caller, sharing=sharing)
            if visible is not None:
                query = query.where(visible)
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            page = filtered(
                select(
                    JobRow.id,
                    JobRow.name,
                    JobRow.owner,
                    JobRow.group_name,
                    JobRow.state,
                    JobRow.priority,
                    _MODE,
                    JobRow.pool,
                    JobRow.nodes,
                    JobRow.gpus,
                    JobRow.created_at,
                    JobRow.started_at,
                    JobRow.finished_at,
                    JobRow.access,
                    JobRow.group_id,
                    JobRow.placement,
                ),
                wanted,
            )
            if visible is not None:
                page = page.where(visible)
            rows = session.execute(
                page.order_by(*ordering(wanted)).offset(wanted.offset).limit(wanted.limit)
            ).all()
        items = []
        for r in rows:
            relation = relation_to(caller, r.owner, r.group_id)
            access = Access(r.access or Access.NONE.value)
            allowed = frozenset(
                a
                for a in OFFERED_JOB_ACTIONS
                if decide(relation, a, access, sharing=sharing) is Verdict.ALLOW
            )
            items.append(
                JobSummary(
                    id=r.id,
                    name=r.name,
                    owner=r.owner,
                    group=r.group_name or "",
                    state=JobState(r.state),
                    priority=r.priority,
                    mode=r[6] or JobMode.SINGLE.value,
                    pool=r.pool or "",
                    nodes=r.nodes,
                    gpus=r.gpus,
                    created_at=r.created_at,
                    started_at=r.started_at,
                    finished_at=r.finished_at,
                    allowed=allowed,
                    held_gpus=held_gpus(r.placement),
                )
            )
        return SearchPage(
            items=items,
            total=total,
            offset=wanted.offset,
            limit=wanted.limit,
            can_stop=any(Action.STOP in i.allowed and not i.state.is_terminal() for i in items),
            can_delete=any(Action.DELETE in i.allowed and i.state.is_terminal() for i in items),
        )


def check_page(wanted: JobQuery, largest: int) -> None:
    """Refuse a page out of range (offset below 0, limit not within 1..``largest``)."""
    problem = wanted.page_error(largest)
    if problem:
        raise InvalidSpec(problem)


def filtered(query: Select[Any], wanted: JobQuery) -> Select[Any]:
    """``query`` restricted to the jobs ``wanted`` matches (not yet to what a caller sees)."""
    conditions = list(_conditions(wanted))
    return query.where(*conditions) if conditions else query


def ordering(wanted: JobQuery) -> tuple[ColumnElement[Any], ...]:
    """The ORDER BY of ``wanted``: its column, then the id, each in its direction."""
    column = _SORT_COLUMNS[wanted.sort]
    order = column.desc() if wanted.descending else column.asc()
    tie = JobRow.id.desc() if wanted.descending else JobRow.id.asc()
    return (order, tie)


def _conditions(wanted: JobQuery) -> Sequence[ColumnElement[bool]]:
    return [*_which(wanted), *_whose(wanted), *_when(wanted), *_searched(wanted.text)]


def _which(wanted: JobQuery) -> list[ColumnElement[bool]]:
    """By id, array, state, name, priority and mode."""
    found: list[ColumnElement[bool]] = []
    if wanted.ids:
        found.append(JobRow.id.in_(sorted(set(wanted.ids))))
    if wanted.array is not None:
        # An array's first task is the array itself (its own id is the array's).
        found.append(or_(JobRow.array_id == wanted.array, JobRow.id == wanted.array))
    if wanted.statuses:
        states = sorted({s.value for st in wanted.statuses for s in JobState.for_status(st)})
        found.append(JobRow.state.in_(states))
    if wanted.name:
        found.append(JobRow.name.contains(wanted.name, autoescape=True))
    if wanted.priority is not None:
        found.append(JobRow.priority == wanted.priority.value)
    if wanted.mode is not None:
        found.append(wanted.mode.value == _MODE)
    return found


def _whose(wanted: JobQuery) -> list[ColumnElement[bool]]:
    """By owner, group and pool."""
    found: list[ColumnElement[bool]] = []
    if wanted.owner:
        found.append(JobRow.owner == wanted.owner)
    if wanted.group:
        found.append(JobRow.group_name == wanted.group)
    if wanted.pool == DEFAULT_POOL:  # a job that names no pool runs in the default one
        found.append(or_(JobRow.pool.is_(None), JobRow.pool == DEFAULT_POOL))
    elif wanted.pool:
        found.append(JobRow.pool == wanted.pool)
    return found


def _when(wanted: JobQuery) -> list[ColumnElement[bool]]:
    """By the times it was submitted and ended."""
    found: list[ColumnElement[bool]] = []
    if wanted.since is not None:
        found.append(JobRow.created_at >= wanted.since)
    if wanted.until is not None:
        found.append(JobRow.created_at < wanted.until)
    if wanted.active_after is not None:
        found.append(or_(JobRow.finished_at.is_(None), JobRow.finished_at >= wanted.active_after))
    if wanted.created_before is not None:
        found.append(JobRow.created_at <= wanted.created_before)
    return found


def _searched(text: str) -> list[ColumnElement[bool]]:
    """The web's search box: a name substring or a job id."""
    text = text.strip()
    if not text:
        return []
    number = text.removeprefix("#")
    by_name = JobRow.name.contains(text, autoescape=True)
    if number.isdigit() and len(number) < 12:
        # "#12" is job 12; "12" is job 12 or a name with 12 in it.
        by_id = JobRow.id == int(number)
        return [by_id if text.startswith("#") else or_(by_id, by_name)]
    return [by_name]
