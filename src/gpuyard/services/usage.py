"""Usage rules: a job's and a node's series over a window, and the pool now.

The controller's sampler writes the series (:mod:`gpuyard.controller.sampler`); this reads
them. A job's usage is shown to whoever may view the job (the same answer as ``GET
/jobs/{id}`` for one who may not: it does not exist); a node's to any signed-in user, like the
node list. "Now" is the latest sample, and only while it is fresh: a controller that stopped
sampling leaves figures that would lie, so after three intervals there are none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import NotFound
from gpuyard.models import JobState, NodeState
from gpuyard.models.access import Action
from gpuyard.models.holding import held_gpus
from gpuyard.models.usage import (
    DEFAULT_INTERVAL,
    JobNow,
    JobUsage,
    NodeNow,
    NodeUsageSeries,
    Point,
    PoolUsage,
    UsagePoint,
    Window,
    WorkerSeries,
    combine,
    cutoff,
    resolution,
)
from gpuyard.services.auth import Policy
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, NodeRow, NodeUsageRow, WorkerRow, WorkerUsageRow

__all__ = ["Latest", "UsageService"]

STALE_AFTER = 3
"""Intervals after which the latest sample no longer says what is used now."""
MAX_TOP = 1000


@dataclass(frozen=True, slots=True)
class Latest:
    """The latest fresh sample: per node, and per running job (its workers added up)."""

    nodes: dict[str, Point] = field(default_factory=dict)
    jobs: dict[int, Point] = field(default_factory=dict)


class UsageService:
    def __init__(
        self, store: Store, *, clock: Clock, policy: Policy, interval: float = DEFAULT_INTERVAL
    ) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy
        self.interval = interval

    def _since(self, window: Window) -> tuple[float, float]:
        """The window's step and its oldest bucket."""
        res = resolution(window)
        step = res.step_for(self.interval)
        return step, cutoff(self.clock.now(), step, res.points(self.interval))

    def job(self, job_id: int, *, actor: str, window: Window) -> JobUsage:
        """One series per worker of the job (of every attempt that ran in the window)."""
        step, since = self._since(window)
        level = resolution(window).level
        with self.store.read() as session:
            self.policy.check_job(session, actor, session.get(JobRow, job_id), job_id, Action.VIEW)
            rows = session.execute(
                select(WorkerRow.attempt, WorkerRow.rank, WorkerRow.node, WorkerUsageRow)
                .join(WorkerRow, WorkerRow.id == WorkerUsageRow.worker_id)
                .where(
                    WorkerUsageRow.job_id == job_id,
                    WorkerUsageRow.level == level,
                    WorkerUsageRow.t >= since,
                )
                .order_by(WorkerRow.attempt, WorkerRow.rank, WorkerUsageRow.t)
            ).all()
        series: dict[tuple[int, int, str], list[UsagePoint]] = defaultdict(list)
        for attempt, rank, node, point in rows:
            series[attempt, rank, node].append(_point(point))
        return JobUsage(
            job_id=job_id,
            window=window,
            step=step,
            since=_when(since),
            workers=[
                WorkerSeries(attempt=a, rank=r, node=n, points=points)
                for (a, r, n), points in series.items()
            ],
        )

    def node(self, name: str, *, window: Window) -> NodeUsageSeries:
        step, since = self._since(window)
        level = resolution(window).level
        with self.store.read() as session:
            if session.get(NodeRow, name) is None:
                raise NotFound(f"node {name} does not exist (see `gpuyard nodes`)")
            rows = session.scalars(
                select(NodeUsageRow)
                .where(
                    NodeUsageRow.node == name,
                    NodeUsageRow.level == level,
                    NodeUsageRow.t >= since,
                )
                .order_by(NodeUsageRow.t)
            ).all()
        return NodeUsageSeries(
            node=name,
            window=window,
            step=step,
            since=_when(since),
            points=[_point(r) for r in rows],
        )

    # -- now --------------------------------------------------------------------------------

    def latest(self, session: Session | None = None) -> Latest:
        """Each node's and each running job's latest sample, if it is fresh."""
        if session is None:
            with self.store.read() as fresh:
                return self.latest(fresh)
        fresh_from = self.clock.now() - STALE_AFTER * self.interval
        nodes: dict[str, Point] = {}
        t = session.scalar(select(func.max(NodeUsageRow.t)).where(NodeUsageRow.level == 0))
        if t is not None and t >= fresh_from:
            for node_row in session.scalars(
                select(NodeUsageRow).where(NodeUsageRow.level == 0, NodeUsageRow.t == t)
            ):
                nodes[node_row.node] = _figures(node_row)
        jobs: dict[int, Point] = {}
        t = session.scalar(select(func.max(WorkerUsageRow.t)).where(WorkerUsageRow.level == 0))
        if t is not None and t >= fresh_from:
            by_job: dict[int, list[Point]] = defaultdict(list)
            for row in session.scalars(
                select(WorkerUsageRow)
                .join(WorkerRow, WorkerRow.id == WorkerUsageRow.worker_id)
                .join(JobRow, JobRow.id == WorkerUsageRow.job_id)
                .where(
                    WorkerUsageRow.level == 0,
                    WorkerUsageRow.t == t,
                    JobRow.state == JobState.RUNNING,
                    WorkerRow.attempt == JobRow.attempt,
                )
            ):
                by_job[row.job_id].append(_figures(row))
            jobs = {job_id: combine(points, t) for job_id, points in by_job.items()}
        return Latest(nodes=nodes, jobs=jobs)

    def now(self, *, actor: str, limit: int = 20) -> PoolUsage:
        """Every node's latest sample, and the running jobs ``actor`` may view, busiest first
        (GPU utilisation, then CPU cores, then memory; jobs not sampled yet last)."""
        limit = max(1, min(limit, MAX_TOP))
        with self.store.read() as session:
            caller = self.policy.caller(session, actor)
            visible = self.policy.visible(caller, sharing=self.policy.sharing(session))
            query = select(JobRow.id, JobRow.name, JobRow.owner, JobRow.placement).where(
                JobRow.state == JobState.RUNNING
            )
            if visible is not None:
                query = query.where(visible)
            running = session.execute(query).all()
            names = session.scalars(
                select(NodeRow.name).where(NodeRow.state != NodeState.GONE).order_by(NodeRow.name)
            ).all()
            latest = self.latest(session)
        jobs = [_job_now(row, latest.jobs.get(row.id)) for row in running]
        jobs.sort(key=_busiest, reverse=True)
        return PoolUsage(
            interval=self.interval,
            nodes=[_node_now(name, latest.nodes.get(name)) for name in names],
            jobs=jobs[:limit],
        )


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _figures(row: WorkerUsageRow | NodeUsageRow) -> Point:
    return Point(
        row.t,
        row.samples,
        cpu=row.cpu,
        memory=row.memory,
        gpu_util=row.gpu_util,
        gpu_memory=row.gpu_memory,
    )


def _point(row: WorkerUsageRow | NodeUsageRow) -> UsagePoint:
    return UsagePoint(
        time=_when(row.t),
        samples=row.samples,
        cpu=row.cpu,
        memory=row.memory,
        gpu_util=row.gpu_util,
        gpu_memory=row.gpu_memory,
    )


def _ints(value: float | None) -> int | None:
    return None if value is None else round(value)


def _node_now(name: str, p: Point | None) -> NodeNow:
    if p is None:
        return NodeNow(name=name)
    return NodeNow(
        name=name,
        time=_when(p.t),
        cpu=p.cpu,
        memory=_ints(p.memory),
        gpu_util=p.gpu_util,
        gpu_memory=_ints(p.gpu_memory),
    )


def _job_now(row: Any, p: Point | None) -> JobNow:
    nodes: Sequence[str] = list(dict.fromkeys(s.get("node", "") for s in row.placement or []))
    base = {
        "id": row.id,
        "name": row.name,
        "owner": row.owner,
        "nodes": nodes,
        "gpus": sum(len(s.get("gpus") or ()) for s in row.placement or []),
        "held_gpus": held_gpus(row.placement) or 0,
    }
    if p is None:
        return JobNow(**base)
    return JobNow(
        **base,
        time=_when(p.t),
        cpu=p.cpu,
        memory=_ints(p.memory),
        gpu_util=p.gpu_util,
        gpu_memory=_ints(p.gpu_memory),
    )


def _busiest(job: JobNow) -> tuple[bool, float, float, int]:
    return (
        job.time is not None,
        job.gpu_util if job.gpu_util is not None else -1.0,
        job.cpu or 0.0,
        job.memory or 0,
    )
