"""Per-job results and the summary figures, per cluster and overall.

- ``queue``: all the time a job spent pending, including after preemptions;
  ``jct = end - submit``.
- averages are over the jobs that finished; ``unfinished`` counts the others (a job that
  never fits its cluster, or a policy that never starts it).
- p50 (the median) / p99 / p99.9 of the queueing delay use linear interpolation between
  order statistics (numpy's default, which is how the published figures were computed).
  The median is there because the average hides the typical job: a few jobs waiting days
  pull the average of a trace where most jobs start at once far above what most users saw.
- ``alloc_waiting``: the share of the cluster's GPUs allocated while at least one job was
  pending, weighted by time. Overall: summed GPU-seconds over summed capacity-seconds of
  each cluster's waiting periods.
- ``makespan``: last end minus first submit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuyard.simulator.engine import PartitionResult

__all__ = [
    "OVERALL",
    "JobResult",
    "Occupancy",
    "PredictionError",
    "StartPredictionError",
    "Summary",
    "job_results",
    "percentile",
    "prediction_error",
    "start_prediction_error",
    "summarize",
    "summarize_by_cluster",
]

OVERALL = "(all)"


@dataclass(frozen=True, slots=True)
class JobResult:
    policy: str
    cluster: str
    job_id: str
    gpus: int
    submit: float
    start: float | None
    end: float | None
    queue: float | None
    jct: float | None
    preemptions: int


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    cluster: str
    jobs: int
    unfinished: int
    avg_jct: float
    avg_queue: float
    p50_queue: float
    p99_queue: float
    p999_queue: float
    alloc_waiting: float | None
    """None where unknown (published results carry no allocation data)."""
    makespan: float
    preemptions: int
    published: bool = False


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; ``values`` need not be sorted."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def job_results(result: PartitionResult) -> list[JobResult]:
    out: list[JobResult] = []
    for job in result.jobs:
        done = job.end is not None
        out.append(
            JobResult(
                policy=result.policy,
                cluster=result.partition,
                job_id=job.job_id,
                gpus=job.gpus,
                submit=job.submit,
                start=job.first_start,
                end=job.end,
                queue=job.queued if done else None,
                jct=job.end - job.submit if job.end is not None else None,
                preemptions=job.preemptions,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Occupancy:
    """What the engine integrated for one cluster: GPU-seconds while jobs waited."""

    gpus: int
    waiting_seconds: float
    allocated_while_waiting: float

    @classmethod
    def of(cls, result: PartitionResult) -> Occupancy:
        return cls(result.gpus, result.waiting_seconds, result.allocated_while_waiting)


def summarize(
    policy: str,
    cluster: str,
    jobs: Sequence[JobResult],
    occupancy: Iterable[Occupancy] | None = None,
    *,
    published: bool = False,
) -> Summary:
    done = [j for j in jobs if j.jct is not None and j.queue is not None]
    queues = [j.queue for j in done if j.queue is not None]
    jcts = [j.jct for j in done if j.jct is not None]
    ends = [j.end for j in done if j.end is not None]
    return Summary(
        policy=policy,
        cluster=cluster,
        jobs=len(jobs),
        unfinished=len(jobs) - len(done),
        avg_jct=_mean(jcts),
        avg_queue=_mean(queues),
        p50_queue=percentile(queues, 50.0),
        p99_queue=percentile(queues, 99.0),
        p999_queue=percentile(queues, 99.9),
        alloc_waiting=_alloc_rate(occupancy) if occupancy is not None else None,
        makespan=(max(ends) - min(j.submit for j in jobs)) if ends else math.nan,
        preemptions=sum(j.preemptions for j in jobs),
        published=published,
    )


def summarize_by_cluster(
    policy: str,
    rows: Sequence[JobResult],
    occupancy: Mapping[str, Occupancy] | None = None,
    *,
    published: bool = False,
) -> list[Summary]:
    """One summary per cluster (in order of appearance), then the overall one."""
    by_cluster: dict[str, list[JobResult]] = {}
    for row in rows:
        by_cluster.setdefault(row.cluster, []).append(row)
    out = [
        summarize(
            policy,
            cluster,
            part,
            [occupancy[cluster]] if occupancy is not None else None,
            published=published,
        )
        for cluster, part in by_cluster.items()
    ]
    overall = list(occupancy.values()) if occupancy is not None else None
    out.append(summarize(policy, OVERALL, rows, overall, published=published))
    return out


@dataclass(frozen=True, slots=True)
class PredictionError:
    """How the run times a policy predicted at submission compared with what the jobs ran
    (those that finished and were told one)."""

    jobs: int
    median_log_ratio: float
    """Median of |ln(ran / predicted)|: 0 is exact, 0.69 a factor of two."""
    coverage: float
    """Share of jobs whose run time fell inside the interval they were told."""


def prediction_error(results: Iterable[PartitionResult]) -> PredictionError | None:
    """Over all of ``results`` (None if no job was told a prediction)."""
    ratios: list[float] = []
    inside = 0
    for result in results:
        for index, (seconds, low, high) in result.predicted.items():
            job = result.jobs[index]
            if job.end is None:
                continue
            ran = max(job.ran, 1.0)
            ratios.append(abs(math.log(ran / max(seconds, 1.0))))
            inside += low <= ran <= high
    if not ratios:
        return None
    return PredictionError(len(ratios), percentile(ratios, 50), inside / len(ratios))


@dataclass(frozen=True, slots=True)
class StartPredictionError:
    """How the starts predicted at submission (sampled jobs) compared with the real ones,
    over the jobs that waited at least ``min_wait`` seconds."""

    jobs: int
    given: int
    """Those told a start time (the others: "no start time can be given")."""
    inside: int
    """Those whose real start fell inside the range they were told."""
    median_error: float | None
    """Median |predicted start - real start|, seconds, over those told a time."""

    @property
    def coverage(self) -> float:
        return self.inside / self.jobs if self.jobs else 0.0


def start_prediction_error(
    results: Iterable[PartitionResult], min_wait: float = 60.0
) -> StartPredictionError:
    jobs = given = inside = 0
    errors: list[float] = []
    for result in results:
        for index, (start, low, high) in result.forecasts.items():
            job = result.jobs[index]
            if job.first_start is None or job.first_start - job.submit < min_wait:
                continue
            jobs += 1
            if start is None or low is None or high is None:
                continue
            given += 1
            inside += low - 1.0 <= job.first_start <= high + 1.0  # the engine's 1 s ticks
            errors.append(abs(start - job.first_start))
    return StartPredictionError(jobs, given, inside, percentile(errors, 50) if errors else None)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _alloc_rate(occupancy: Iterable[Occupancy]) -> float | None:
    parts = list(occupancy)
    capacity = sum(o.gpus * o.waiting_seconds for o in parts)
    if capacity <= 0:
        return None  # no job ever waited: the rate is undefined
    return sum(o.allocated_while_waiting for o in parts) / capacity
