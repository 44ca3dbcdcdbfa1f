"""Summary figures: percentiles, averages over finished jobs, allocation while waiting."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gpuyard.simulator import Engine, Partition, PolicyContext, TraceJob
from gpuyard.simulator.metrics import JobResult, Occupancy, percentile, summarize
from gpuyard.simulator.reference import ReferencePolicy
from gpuyard.simulator.study import summaries_of


@pytest.mark.parametrize("q", [0, 50, 90, 99, 99.9, 100])
def test_percentile_interpolates_like_numpy(q: float) -> None:
    rng = random.Random(7)
    values = [rng.expovariate(1 / 3600) for _ in range(1001)]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 99))


def result(job_id: str, submit: float, queue: float | None, jct: float | None) -> JobResult:
    end = None if jct is None else submit + jct
    start = None if queue is None else submit + queue
    return JobResult("p", "c", job_id, 1, submit, start, end, queue, jct, 0)


def test_averages_cover_finished_jobs_and_count_the_others() -> None:
    rows = [result("a", 0, 0, 10), result("b", 5, 10, 40), result("c", 6, None, None)]
    summary = summarize(
        "p", "c", rows, [Occupancy(gpus=8, waiting_seconds=0, allocated_while_waiting=0)]
    )
    assert (summary.jobs, summary.unfinished) == (3, 1)
    assert (summary.avg_jct, summary.avg_queue) == (25, 5)
    assert summary.makespan == 45  # last end (5 + 40) - first submit (0)
    assert summary.alloc_waiting is None  # nobody waited: undefined, not 0 %


def test_allocation_while_waiting_weights_clusters_by_capacity_and_time() -> None:
    rows = [result("a", 0, 0, 1)]
    occupancy = [
        Occupancy(gpus=8, waiting_seconds=100, allocated_while_waiting=400),  # 50 %
        Occupancy(gpus=16, waiting_seconds=10, allocated_while_waiting=160),  # 100 %
    ]
    summary = summarize("p", "all", rows, occupancy)
    assert summary.alloc_waiting == pytest.approx((400 + 160) / (800 + 160))


def test_summaries_per_cluster_and_overall_from_a_replay() -> None:
    jobs = [TraceJob("a", "c", "u", "g", 0, 4, 10), TraceJob("b", "c", "u", "g", 1, 8, 5)]
    partition = Partition.uniform("c", nodes=1)
    run = Engine(
        partition, jobs, ReferencePolicy(PolicyContext(partition), "fifo"), policy_name="fifo"
    ).run()
    per_cluster, overall = summaries_of([run])
    assert (per_cluster.cluster, overall.cluster) == ("c", "(all)")
    # b waits 1..10 while 4 of 8 GPUs are busy.
    assert (overall.avg_queue, overall.avg_jct, overall.alloc_waiting) == (4.5, 12, 0.5)
    assert overall.p99_queue == pytest.approx(0 + 9 * 0.99)


def test_the_median_queueing_delay_is_in_the_summary() -> None:
    rows = [result(str(i), 0, q, q + 1) for i, q in enumerate([0, 0, 0, 10, 1000])]
    summary = summarize("p", "c", [*rows, result("x", 0, None, None)])
    assert summary.p50_queue == 0  # most jobs started at once ...
    assert summary.avg_queue == 202  # ... which the average does not show
    rows = [result(str(i), 0, q, q + 1) for i, q in enumerate([1, 2, 3, 4])]
    assert summarize("p", "c", rows).p50_queue == 2.5
