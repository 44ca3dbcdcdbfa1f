"""Usage sampling beside the reconcile loop: what running workers and nodes use, stored as
series at four resolutions with bounded retention (docs/monitoring.md).

Every ``interval`` seconds (the ``usage_interval`` setting, 10 s by default) on a thread of
its own, like the forecaster, so that a slow read of many cgroups never delays a pass:

1. read the running workers' handles and the nodes (a short read, closed before any I/O);
2. ask the executor what each worker and node uses; CPU comes as a counter, and the
   utilisation in cores is derived from the last reading kept in memory
   (:func:`gpuyard.models.usage.cpu_cores`; a restarted controller's first sample has none);
   a node the executor cannot measure as a whole (a virtual node) counts its workers;
3. average each coarser level's buckets that closed since the last round from the level
   below (:func:`gpuyard.models.usage.downsample`; closed buckets no longer change, so this is
   read before the write);
4. write it all in **one transaction**: the samples and the averages (one executemany per
   table), and the deletion of every point older than its resolution keeps
   (:func:`gpuyard.models.usage.cutoff`). bench/usage.py measures it.

Each level is made from the one below when a bucket closes, and every level keeps longer than
the next one's step, so the roll-up needs no state that a crash could lose: after a restart the
sampler rolls up again whatever the level below still holds, skipping buckets already made.

A worker that cannot be measured has no point for that sample; a job whose handles make the
executor raise is measured alone, and only its workers go without.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.executors.base import Executor
from gpuyard.models import NodeState
from gpuyard.models.usage import (
    DEFAULT_INTERVAL,
    RESOLUTIONS,
    NodeUsage,
    Point,
    Resolution,
    WorkerUsage,
    bucket,
    combine,
    cpu_cores,
    cutoff,
    downsample,
)
from gpuyard.models.worker import Handle, WorkerState
from gpuyard.periodic import Periodic
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeRow, NodeUsageRow, WorkerRow, WorkerUsageRow

__all__ = ["UsageSampler"]

log = logging.getLogger("gpuyard.controller")

_WORKERS = cast("Table", WorkerUsageRow.__table__)
_NODES = cast("Table", NodeUsageRow.__table__)
_FIGURES = ("samples", "cpu", "memory", "gpu_util", "gpu_memory")
CHUNK = 500
"""Ids per IN list (bind-parameter limits)."""


class UsageSampler:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        clock: Clock,
        *,
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.interval = interval
        self._workers: dict[int, tuple[float, float]] = {}
        """Worker id -> (monotonic time, CPU seconds) of its last reading."""
        self._nodes: dict[str, tuple[float, float]] = {}
        self._rolled: dict[int, float] = {}
        """Level -> the bucket boundary up to which it was rolled up from the level below."""
        self._periodic = Periodic("usage-sampler", self._round)
        self._failing = False

    def start(self) -> None:
        self._periodic.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._periodic.stop(timeout)

    def _round(self) -> float:
        try:
            self.sample_once()
        except Exception:  # the next round tries again
            if not self._failing:
                log.exception("sampling usage failed")
            self._failing = True
        else:
            self._failing = False
        # Early in the next bucket: one sample per bucket, none skipped by drift.
        now = self.clock.now()
        return bucket(now, self.interval) + self.interval - now + 0.05

    # -- one round --------------------------------------------------------------------------

    def sample_once(self) -> int:
        """Sample every running worker and every node, store, roll up, prune. Returns how many
        samples were stored."""
        with self.store.read() as session:
            workers = session.execute(
                select(WorkerRow.id, WorkerRow.job_id, WorkerRow.node, WorkerRow.handle).where(
                    WorkerRow.state == WorkerState.RUNNING, WorkerRow.handle.is_not(None)
                )
            ).all()
            nodes = list(
                session.scalars(select(NodeRow.name).where(NodeRow.state != NodeState.GONE))
            )
        now, mono = self.clock.now(), self.clock.monotonic()
        t = bucket(now, self.interval)
        readings = self._usages([(job_id, handle) for _, job_id, _, handle in workers])
        worker_points: dict[int, tuple[int, str, Point]] = {}
        for (worker_id, job_id, node, _), usage in zip(workers, readings, strict=True):
            if usage is not None:
                point = self._worker_point(worker_id, usage, t, mono)
                worker_points[worker_id] = (job_id, node, point)
        self._workers = {w: v for w, v in self._workers.items() if w in worker_points}
        node_points = self._node_points(nodes, worker_points.values(), t, mono)
        rows: dict[Table, list[dict[str, Any]]] = {
            _WORKERS: [
                {"worker_id": w, "job_id": job_id, "level": 0, **_values(p)}
                for w, (job_id, _, p) in worker_points.items()
            ],
            _NODES: [{"node": name, "level": 0, **_values(p)} for name, p in node_points.items()],
        }
        # Closed buckets no longer change: averaged before the write, which stays short (on
        # SQLite it holds the one writer lock the reconcile loop needs too).
        with self.store.read() as session:
            rolled = self._roll_up(session, now, rows)
        with self.store.write() as session:
            stored = self._insert(session, t, rows)
            self._prune(session, now)
        self._rolled.update(rolled)
        return stored

    def _usages(self, rows: Sequence[tuple[int, Handle]]) -> list[WorkerUsage | None]:
        """The executor's answer for each (job, handle): one call for all; if that raises, one
        call per job, so a job whose handles break the executor goes without, alone."""
        if not rows:
            return []
        try:
            return list(self.executor.usage([handle for _, handle in rows]))
        except Exception:
            log.warning("reading usage failed as a batch; job by job", exc_info=True)
        found: list[WorkerUsage | None] = [None] * len(rows)
        by_job: dict[int, list[int]] = defaultdict(list)
        for i, (job_id, _) in enumerate(rows):
            by_job[job_id].append(i)
        for job_id, indices in by_job.items():
            try:
                answers = self.executor.usage([rows[i][1] for i in indices])
            except Exception as exc:
                log.warning("job %s: reading its workers' usage failed: %s", job_id, exc)
                continue
            for i, answer in zip(indices, answers, strict=True):
                found[i] = answer
        return found

    def _worker_point(self, worker_id: int, usage: WorkerUsage, t: float, mono: float) -> Point:
        cores = cpu_cores(self._workers.get(worker_id), mono, usage.cpu_seconds)
        if usage.cpu_seconds is not None:
            self._workers[worker_id] = (mono, usage.cpu_seconds)
        return Point(
            t,
            cpu=cores,
            memory=usage.memory,
            gpu_util=usage.gpu_util,
            gpu_memory=usage.gpu_memory,
        )

    def _node_points(
        self,
        nodes: Sequence[str],
        workers: Iterable[tuple[int, str, Point]],
        t: float,
        mono: float,
    ) -> dict[str, Point]:
        """Each node's point: what the executor measured of it, and for the figures it could
        not measure (a virtual node's CPU and memory), its workers' added up."""
        try:
            measured = self.executor.node_usage()
        except Exception:
            log.warning("reading the nodes' usage failed", exc_info=True)
            measured = {}
        on_node: dict[str, list[Point]] = defaultdict(list)
        for _, node, point in workers:
            on_node[node].append(point)
        points = {}
        for name in nodes:
            usage = measured.get(name, NodeUsage())
            theirs = combine(on_node.get(name, []), t)
            cpu = theirs.cpu
            if usage.cpu_seconds is not None:
                cpu = cpu_cores(self._nodes.get(name), mono, usage.cpu_seconds)
                self._nodes[name] = (mono, usage.cpu_seconds)
            points[name] = Point(
                t,
                cpu=cpu,
                memory=theirs.memory if usage.memory is None else usage.memory,
                gpu_util=usage.gpu_util,
                gpu_memory=usage.gpu_memory,
            )
        return points

    # -- the store ---------------------------------------------------------------------------

    def _insert(self, session: Session, t: float, rows: dict[Table, list[dict[str, Any]]]) -> int:
        """Insert every row (one executemany per table); returns how many samples."""
        workers = rows[_WORKERS]
        ids = sorted({r["worker_id"] for r in workers})
        alive: set[int] = set()
        for chunk in range(0, len(ids), CHUNK):  # a job deleted meanwhile takes its workers
            alive.update(
                session.scalars(
                    select(WorkerRow.id).where(WorkerRow.id.in_(ids[chunk : chunk + CHUNK]))
                )
            )
        # Sampled already in this bucket (a round run twice, a restart): the first one stands.
        done = {
            _WORKERS: set(session.scalars(select(_WORKERS.c.worker_id).where(*_at(_WORKERS, t)))),
            _NODES: set(session.scalars(select(_NODES.c.node).where(*_at(_NODES, t)))),
        }
        stored = 0
        for table, key in ((_WORKERS, "worker_id"), (_NODES, "node")):
            keep = [
                r
                for r in rows[table]
                if (table is _NODES or r[key] in alive)
                and not (r["level"] == 0 and r[key] in done[table])
            ]
            if keep:
                session.execute(insert(table), keep)
            stored += sum(1 for r in keep if r["level"] == 0)
        return stored

    def _roll_up(
        self, session: Session, now: float, rows: dict[Table, list[dict[str, Any]]]
    ) -> dict[int, float]:
        """Average each coarser level's buckets that closed since the last round from the
        level below (stored, and this round's rows), adding them to ``rows``; returns the new
        boundaries (kept once the write commits)."""
        rolled = {}
        for finer, coarser in itertools.pairwise(RESOLUTIONS):
            boundary = bucket(now, coarser.step)
            start = self._rolled.get(coarser.level)
            if start is None:  # after a start: whatever the level below still holds
                start = boundary - finer.span
            if boundary <= start:
                continue
            for table, key in ((_WORKERS, "worker_id"), (_NODES, "node")):
                span = (start, boundary)
                rows[table] += _roll_table(
                    session, table, key, finer.level, coarser, span, rows[table]
                )
            rolled[coarser.level] = boundary
        return rolled

    def _prune(self, session: Session, now: float) -> None:
        """Delete every point older than its resolution keeps: a fixed number of buckets per
        series and level."""
        for res in RESOLUTIONS:
            step = res.step_for(self.interval)
            oldest = cutoff(now, step, res.points(self.interval))
            for table in (_WORKERS, _NODES):
                session.execute(delete(table).where(table.c.level == res.level, table.c.t < oldest))


def _roll_table(
    session: Session,
    table: Table,
    key: str,
    level: int,
    coarser: Resolution,
    span: tuple[float, float],
    pending: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The rows of ``coarser`` for the buckets in ``span``, from the points at ``level``:
    those stored and those about to be (``pending``); none for a bucket already made."""
    start, end = span
    job = table.c.job_id if key == "worker_id" else table.c.level  # level: a placeholder
    within = (table.c.t >= start, table.c.t < end)
    found: dict[tuple[Any, float], tuple[Any, Point]] = {}
    for name, job_id, t, samples, cpu, memory, gpu_util, gpu_memory in session.execute(
        select(table.c[key], job, table.c.t, *(table.c[f] for f in _FIGURES)).where(
            table.c.level == level, *within
        )
    ):
        found[name, t] = (job_id, Point(t, samples, cpu, memory, gpu_util, gpu_memory))
    for r in pending:
        if r["level"] == level and start <= r["t"] < end and (r[key], r["t"]) not in found:
            figures = [r[f] for f in _FIGURES[1:]]
            found[r[key], r["t"]] = (r.get("job_id"), Point(r["t"], r["samples"], *figures))
    if not found:
        return []
    series: dict[Any, list[Point]] = defaultdict(list)
    jobs: dict[Any, Any] = {}
    for (name, _), (job_id, point) in found.items():
        series[name].append(point)
        jobs[name] = job_id
    made = {
        (name, t)
        for name, t in session.execute(
            select(table.c[key], table.c.t).where(table.c.level == coarser.level, *within)
        )
    }
    out = []
    for name, points in series.items():
        for p in downsample(points, coarser.step):
            if (name, p.t) in made:
                continue  # made before a restart
            extra = {"job_id": jobs[name]} if key == "worker_id" else {}
            out.append({key: name, "level": coarser.level, **extra, **_values(p)})
    return out


def _at(table: Table, t: float) -> tuple[Any, ...]:
    return (table.c.level == 0, table.c.t == t)


def _values(p: Point) -> dict[str, Any]:
    return {
        "t": p.t,
        "samples": p.samples,
        "cpu": p.cpu,
        "memory": None if p.memory is None else round(p.memory),
        "gpu_util": p.gpu_util,
        "gpu_memory": None if p.gpu_memory is None else round(p.gpu_memory),
    }
