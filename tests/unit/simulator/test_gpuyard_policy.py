"""The production-policy seam: trace jobs as scheduler requests, replayed through decide(),
with no oracle input."""

from __future__ import annotations

import pytest

from gpuyard.scheduler import Member, PoolPolicy, Request
from gpuyard.scheduler.snapshot import Preemption
from gpuyard.simulator import Decision, Engine, Partition, PolicyContext, TraceJob, View
from gpuyard.simulator.gpuyard_policy import GpuyardPolicy, request_for
from gpuyard.simulator.metrics import prediction_error
from gpuyard.simulator.runner import POLICIES


@pytest.mark.parametrize(
    ("gpus", "nodes", "expected"),
    [
        (1, None, Request((Member(1, 0.0),))),
        (8, None, Request((Member(8, 0.0),))),
        (16, None, Request((Member(8, 0.0, whole_node=True),) * 2)),
        (14, None, Request((Member(8, 0.0, whole_node=True), Member(6, 0.0)))),
        (16, 4, Request((Member(4, 0.0, whole_node=True),) * 4)),
    ],
)
def test_requests_of_trace_jobs(gpus: int, nodes: int | None, expected: Request) -> None:
    assert request_for(gpus, nodes, node_gpus=8) == expected


def job(job_id: str, submit: float, gpus: int, duration: float, user: str = "u") -> TraceJob:
    return TraceJob(job_id, "c", user, "g", submit, gpus, duration)


class FirstDecision:
    """Wraps a policy and keeps its first decision."""

    def __init__(self, inner: GpuyardPolicy) -> None:
        self.inner = inner
        self.first: Decision | None = None

    def decide(self, view: View) -> Decision:
        decision = self.inner.decide(view)
        if self.first is None:
            self.first = decision
        return decision


def test_a_replay_through_decide_places_gangs_on_whole_nodes_and_finishes_everything() -> None:
    partition = Partition.uniform("c", nodes=3)
    jobs = [
        job("one", 0, 1, 50),
        job("gang", 0, 16, 20),
        job("four", 1, 4, 10),
        job("eight", 2, 8, 30),
        job("two", 3, 2, 5),
    ]
    policy = GpuyardPolicy(PolicyContext(partition))
    engine = Engine(partition, jobs, policy, policy_name="gpuyard")
    result = engine.run()
    assert all(j.end is not None for j in result.jobs)
    assert engine.free == [8, 8, 8]
    # What the pool learns of jobs that ended before its last decision: their run time.
    learned = {h.index: h.ran for h in policy.history}
    assert learned
    assert learned == {i: jobs[i].duration for i in learned}


def test_the_policy_is_not_given_the_trace_durations() -> None:
    assert POLICIES["gpuyard"].oracle is False
    partition = Partition.uniform("c", nodes=1)
    shapes = [("a", 4), ("b", 4), ("c", 2), ("d", 8), ("e", 1)]

    def first_decision(durations: list[float]) -> list[tuple[int, int]]:
        jobs = [job(n, 0, g, d) for (n, g), d in zip(shapes, durations, strict=True)]
        recorder = FirstDecision(GpuyardPolicy(PolicyContext(partition)))
        Engine(partition, jobs, recorder).run()
        assert recorder.first is not None
        return [(s.job, sum(x.gpus for x in s.placement)) for s in recorder.first.starts]

    # Same submissions, opposite run times: what starts first cannot differ.
    assert first_decision([10, 20, 30, 40, 50]) == first_decision([50_000, 4, 3, 2, 1])


def test_suspensions_decided_by_the_scheduler_are_applied_with_their_overhead() -> None:
    partition = Partition.uniform("c", nodes=1)
    low = TraceJob("low", "c", "u1", "g", 0, 8, 100, priority=0)
    high = TraceJob("high", "c", "u2", "g", 10, 8, 20, priority=2)
    policy = GpuyardPolicy(
        PolicyContext(partition), pools={"default": PoolPolicy(preemption=Preemption.SUSPEND)}
    )
    low_run, high_run = Engine(partition, [low, high], policy).run().jobs
    assert (high_run.first_start, high_run.end) == (10, 30)
    # low resumes when high ends: 90 s of work left plus the 40 s overhead.
    assert (low_run.preemptions, low_run.queued, low_run.end) == (1, 20, 30 + 90 + 40)


def test_run_times_are_learnt_as_the_replay_goes_and_starts_predicted_with_a_range() -> None:
    """One node of 8 GPUs; a user's 8-GPU jobs of 100 s, one after another. The first three
    are told nothing (no history); later ones are told 100 s, and a job that waits behind a
    running one is told when it starts, within a range that holds its real start."""
    partition = Partition.uniform("c", nodes=1)
    jobs = [job(f"j{i}", i * 200.0, 8, 100) for i in range(4)]
    jobs += [job("a", 1000, 8, 100), job("b", 1010, 8, 100)]
    policy = GpuyardPolicy(PolicyContext(partition, forecast_every=1))
    result = Engine(partition, jobs, policy, policy_name="gpuyard").run()
    assert sorted(policy.told_at_submission) == [3, 4, 5]
    assert policy.told_at_submission[4][0] == 100.0
    error = prediction_error([result])
    assert error is not None and (error.jobs, error.median_log_ratio, error.coverage) == (3, 0, 1)
    start, low, high = policy.start_forecasts[5]  # b waits for a
    assert start == 1100.0 and low is not None and high is not None
    assert low <= result.jobs[5].first_start <= high
    assert policy.start_forecasts[4] == (1000.0, 1000.0, 1000.0)  # a starts at once
    blind = GpuyardPolicy(PolicyContext(partition, forecast_every=1), predict=False)
    Engine(partition, jobs, blind, policy_name="gpuyard-blind").run()
    assert blind.told_at_submission == {} and blind.start_forecasts[5] == (None, None, None)
