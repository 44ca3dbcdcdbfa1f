"""The pool as Prometheus sees it: ``GET /metrics`` (docs/monitoring.md).

A collector reads the store at scrape time — no counter kept in memory can drift from what the
store says, and a restarted server reports the same figures. No job name or owner appears.
Without a token, a scrape gets the pool as a whole only (per pool, tier, state, node): the
endpoint is open to a scraper, like ``/api/v1/health``, and says nothing of any one job. With
a valid token it adds the usage of running jobs by id, each job only to a viewer who may see
it (:mod:`gpuyard.models.disclosure`; an admin's token sees them all: what a Prometheus that
scrapes per-job series holds). Per-job and per-node usage are the latest fresh sample
(:meth:`UsageService.latest`); a figure that was not measured (GPUs without a driver) has no
sample rather than a 0.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import func, select

from gpuyard.models import JobState
from gpuyard.models.states import HOLDING, PENDING
from gpuyard.models.usage import Point
from gpuyard.scheduler.durations import Accuracy
from gpuyard.scheduler.snapshot import DEFAULT_POOL
from gpuyard.services.auth import Policy
from gpuyard.services.disclosure import Viewer
from gpuyard.services.usage import Latest
from gpuyard.store.durations import RunTimes
from gpuyard.store.engine import Store
from gpuyard.store.tables import FaultRow, JobRow, NodeRow

__all__ = ["MetricsService", "PoolCollector", "registry"]


_USAGE = (
    ("cpu", "cpu_cores", "CPU cores in use"),
    ("memory", "memory_bytes", "Bytes of memory in use"),
    ("gpu_util", "gpu_utilization_percent", "GPU utilisation, percent (mean of its GPUs)"),
    ("gpu_memory", "gpu_memory_bytes", "Bytes of GPU memory in use"),
)
"""Usage figures: Point field, series suffix, help."""


JobFilter = Callable[[dict[int, Point]], dict[int, Point]]
"""Of the running jobs' latest samples, those a scrape may carry."""


class PoolCollector(Collector):
    def __init__(
        self,
        store: Store,
        controller: Callable[[], dict[str, Any] | None],
        usage: Callable[[], Latest] | None = None,
        jobs: JobFilter | None = None,
        run_times: RunTimes | None = None,
    ) -> None:
        self.store = store
        self.controller = controller
        self.usage = usage
        self.jobs = jobs
        self.run_times = run_times

    def collect(self) -> Iterator[Metric]:
        with self.store.read() as session:
            states = dict(
                session.execute(select(JobRow.state, func.count()).group_by(JobRow.state)).all()
            )
            waiting = session.execute(
                select(JobRow.pool, JobRow.priority, func.count())
                .where(JobRow.state.in_(sorted(PENDING)))
                .group_by(JobRow.pool, JobRow.priority)
            ).all()
            nodes = list(session.scalars(select(NodeRow)))
            placements = session.scalars(
                select(JobRow.placement).where(JobRow.state.in_(HOLDING))
            ).all()
            faults = session.execute(
                select(FaultRow.kind, func.count()).group_by(FaultRow.kind)
            ).all()
            restarts = session.scalar(select(func.coalesce(func.sum(JobRow.restarts), 0)))
            accuracy = None if self.run_times is None else self.run_times.accuracy(session)
        yield from self._jobs(states, waiting)
        if accuracy is not None:
            yield from _run_times(accuracy)
        yield from self._nodes(nodes, placements)
        faults_metric = CounterMetricFamily(
            "gpuyard_faults", "Faults in the jobs' fault-tolerance logs, by kind.", labels=["kind"]
        )
        for kind, count in sorted(faults):
            faults_metric.add_metric([kind], count)
        yield faults_metric
        yield CounterMetricFamily(
            "gpuyard_job_restarts", "Restarts of jobs after faults.", value=restarts or 0
        )
        yield from self._loop()
        if self.usage is not None:
            latest = self.usage()
            if self.jobs is not None:
                shown = self.jobs(latest.jobs)
                yield from _usage("job", "a running job, its workers added up", shown)
            yield from _usage("node", "a node", latest.nodes)

    @staticmethod
    def _jobs(states: dict[Any, int], waiting: Sequence[Any]) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("gpuyard_jobs", "Jobs in the store, by state.", labels=["state"])
        for state in JobState:
            jobs.add_metric([state.value], states.get(state, 0))
        yield jobs
        queue = GaugeMetricFamily(
            "gpuyard_queue_depth",
            "Jobs waiting to be placed (queued or suspended), by pool and priority tier.",
            labels=["pool", "priority"],
        )
        for pool, priority, count in sorted(waiting, key=lambda r: (r[0] or "", r[1])):
            queue.add_metric([pool or DEFAULT_POOL, priority], count)
        yield queue

    @staticmethod
    def _nodes(nodes: list[NodeRow], placements: Sequence[Any]) -> Iterator[Metric]:
        by_state = Counter(n.state.value for n in nodes)
        node_metric = GaugeMetricFamily("gpuyard_nodes", "Nodes, by state.", labels=["state"])
        for state in ("ready", "cordoned", "gone"):
            node_metric.add_metric([state], by_state.get(state, 0))
        yield node_metric
        pool_of = {n.name: n.effective_labels().get("pool") or DEFAULT_POOL for n in nodes}
        total: dict[str, int] = defaultdict(int)
        for n in nodes:
            if n.state.value != "gone":
                total[pool_of[n.name]] += n.gpus
        used: dict[str, int] = defaultdict(int)
        gpus_of = {n.name: n.gpus for n in nodes}
        for placement in placements:
            for slot in placement or []:
                node = slot.get("node")
                if node in pool_of:
                    count = gpus_of[node] if slot.get("exclusive") else len(slot.get("gpus") or ())
                    used[pool_of[node]] += count
        gpus = GaugeMetricFamily("gpuyard_gpus", "GPUs of the pool's nodes.", labels=["pool"])
        allocated = GaugeMetricFamily(
            "gpuyard_gpus_allocated", "GPUs held by jobs.", labels=["pool"]
        )
        ratio = GaugeMetricFamily(
            "gpuyard_allocation_ratio", "GPUs held by jobs over the pool's GPUs.", labels=["pool"]
        )
        for pool in sorted(set(total) | set(used)):
            gpus.add_metric([pool], total[pool])
            allocated.add_metric([pool], used[pool])
            ratio.add_metric([pool], used[pool] / total[pool] if total[pool] else 0.0)
        yield from (gpus, allocated, ratio)

    def _loop(self) -> Iterator[Metric]:
        state = self.controller() or {}
        if not state:
            return
        yield CounterMetricFamily(
            "gpuyard_controller_passes", "Reconcile passes completed.", value=state["passes"]
        )
        yield CounterMetricFamily(
            "gpuyard_controller_pass_seconds",
            "Seconds the reconcile passes took in all.",
            value=state["pass_seconds"],
        )
        yield CounterMetricFamily(
            "gpuyard_scheduling_passes",
            "Scheduling runs (snapshot, decide, apply).",
            value=state["schedules"],
        )
        yield CounterMetricFamily(
            "gpuyard_scheduling_pass_seconds",
            "Seconds the scheduling runs took in all.",
            value=state["schedule_seconds"],
        )
        yield GaugeMetricFamily(
            "gpuyard_scheduling_last_pass_seconds",
            "Seconds the last scheduling run took.",
            value=state["last_schedule_seconds"],
        )
        yield GaugeMetricFamily(
            "gpuyard_controller_progressing",
            "1 while the controller makes progress, 0 when it stalled.",
            value=1.0 if state.get("progressing") else 0.0,
        )


def _usage(kind: str, what: str, points: dict[Any, Point]) -> Iterator[Metric]:
    for name, suffix, help_text in _USAGE:
        family = GaugeMetricFamily(
            f"gpuyard_{kind}_{suffix}", f"{help_text} by {what} (latest sample).", labels=[kind]
        )
        for key, point in sorted(points.items()):
            value = getattr(point, name)
            if value is not None:
                family.add_metric([str(key)], value)
        yield family


def _run_times(accuracy: Accuracy) -> Iterator[Metric]:
    """How the predicted run times compared with what jobs ran (docs/scheduling.md)."""
    yield CounterMetricFamily(
        "gpuyard_run_time_predictions",
        "Ended jobs whose predicted run time was scored against what they ran.",
        value=accuracy.jobs,
    )
    if accuracy.jobs:
        yield GaugeMetricFamily(
            "gpuyard_run_time_prediction_error",
            "Median of |ln(ran / predicted)| over the scored jobs (0.69: off by 2x).",
            value=accuracy.median_log_ratio or 0.0,
        )
        yield GaugeMetricFamily(
            "gpuyard_run_time_prediction_coverage",
            "Share of the scored jobs that ran within their predicted interval.",
            value=accuracy.coverage or 0.0,
        )


def registry(
    store: Store,
    controller: Callable[[], dict[str, Any] | None],
    usage: Callable[[], Latest] | None = None,
    jobs: JobFilter | None = None,
    run_times: RunTimes | None = None,
) -> CollectorRegistry:
    """A registry of the pool's collector alone (no process or platform series: the server's
    own, not the pool's). ``usage``: the latest samples, for per-node series, and per-job
    series of the jobs that ``jobs`` keeps (None: no per-job series at all). ``run_times``:
    the predictor whose accuracy to report (None: none)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector(store, controller, usage, jobs, run_times))
    return registry


class MetricsService:
    """What one scrape of ``/metrics`` gets, by who asks (docs/monitoring.md)."""

    def __init__(
        self,
        store: Store,
        policy: Policy,
        controller: Callable[[], dict[str, Any] | None],
        usage: Callable[[], Latest] | None = None,
        run_times: RunTimes | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.controller = controller
        self.usage = usage
        self.run_times = run_times

    def exposition(self, viewer: str | None) -> bytes:
        """The text format for ``viewer`` (a signed-in user's name; None: an anonymous
        scrape, which gets no per-job series)."""
        jobs = None if viewer is None else self._visible_to(viewer)
        return generate_latest(
            registry(self.store, self.controller, self.usage, jobs, self.run_times)
        )

    def _visible_to(self, actor: str) -> JobFilter:
        def visible(points: dict[int, Point]) -> dict[int, Point]:
            with self.store.read() as session:
                viewer = Viewer.of(session, self.policy, actor)
                viewer.learn(session, points)
            return {job_id: p for job_id, p in points.items() if viewer.sees(job_id)}

        return visible
