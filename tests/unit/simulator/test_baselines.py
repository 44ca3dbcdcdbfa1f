"""SRTF and Tiresias, the baselines the variants compare against, on hand-made traces."""

from __future__ import annotations

import pytest

from gpuyard.errors import InvalidSpec
from gpuyard.simulator import Engine, Overhead, Partition, PolicyContext, TraceJob
from gpuyard.simulator.baselines import SrtfPolicy, TiresiasPolicy
from gpuyard.simulator.cluster import NodeClass
from gpuyard.simulator.policy import SimulationError
from gpuyard.simulator.variants import scale_arrivals, shrink


def job(job_id: str, submit: float, gpus: int, duration: float) -> TraceJob:
    return TraceJob(job_id, "c", "u", "g", submit, gpus, duration)


ONE_NODE = Partition.uniform("c", nodes=1, gpus_per_node=4)


def srtf(jobs: list[TraceJob], overhead: Overhead | None = None) -> Engine:
    overhead = overhead or Overhead.flat(0)
    context = PolicyContext(ONE_NODE, [j.duration for j in jobs], overhead.of)
    return Engine(ONE_NODE, jobs, SrtfPolicy(context), overhead=overhead)


def test_srtf_preempts_a_longer_job_for_a_shorter_arrival() -> None:
    result = srtf([job("long", 0, 4, 100), job("short", 10, 4, 5)]).run()
    long, short = result.jobs
    assert (short.first_start, short.end) == (10, 15)
    assert (long.preemptions, long.end) == (1, 105)


def test_srtf_counts_the_preemption_overhead_in_the_remaining_time() -> None:
    # "a" (100 s) is preempted at 10 by "s" (5 s) and resumes at 15, owing 90 s + 20 s of
    # overhead. At 20 it has 105 s left: "b" (100 s) goes first. Without the overhead "a"
    # would seem to have 85 s left and keep running.
    jobs = [job("a", 0, 4, 100), job("s", 10, 4, 5), job("b", 20, 4, 100)]
    a, s, b = srtf(jobs, overhead=Overhead.flat(20)).run().jobs
    assert (s.first_start, s.end) == (10, 15)
    assert b.first_start == 20
    assert a.preemptions == 2


def test_srtf_needs_the_run_times() -> None:
    with pytest.raises(SimulationError, match="run times"):
        SrtfPolicy(PolicyContext(ONE_NODE))


def test_tiresias_decides_on_whole_minutes_only() -> None:
    jobs = [job("a", 30, 1, 10)]
    result = Engine(ONE_NODE, jobs, TiresiasPolicy(PolicyContext(ONE_NODE))).run()
    assert result.jobs[0].first_start == 60


def test_tiresias_demotes_a_job_past_its_threshold_for_a_new_one() -> None:
    # 4 GPUs: the threshold of 18,000 GPU-seconds is passed after 4,500 s.
    jobs = [job("old", 0, 4, 10_000), job("new", 600, 4, 100)]
    result = Engine(ONE_NODE, jobs, TiresiasPolicy(PolicyContext(ONE_NODE))).run()
    old, new = result.jobs
    # "new" arrives at 600 but "old" is still in the first queue, ahead by submission:
    # "new" waits until "old" passes the threshold.
    assert new.first_start == 4_560  # strictly past 18,000 at 4,500 s: the next minute
    assert old.preemptions == 1


def test_scaled_arrivals_keep_the_order_and_the_first_submission() -> None:
    jobs = [job("a", 100, 1, 5), job("b", 200, 1, 5), job("c", 300, 1, 5)]
    assert [j.submit for j in scale_arrivals(jobs, 2.0)] == [100, 150, 200]
    assert [j.submit for j in scale_arrivals(jobs, 0.5)] == [100, 300, 500]
    with pytest.raises(InvalidSpec, match="above 0"):
        scale_arrivals(jobs, 0)


def test_shrink_divides_each_node_class_and_keeps_one_node_at_least() -> None:
    cluster = Partition("c", (NodeClass("big", 500, 8), NodeClass("small", 30, 2)))
    assert shrink(cluster, 100).classes == (NodeClass("big", 5, 8),)
    assert shrink(cluster, 10_000).classes == (NodeClass("big", 1, 8),)
    with pytest.raises(InvalidSpec, match="1 or more"):
        shrink(cluster, 0.5)
