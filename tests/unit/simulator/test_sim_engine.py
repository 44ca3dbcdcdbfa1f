"""The engine on hand-made traces: completion, queueing, gangs, preemption accounting,
wake-ups, when the policy is asked, and what it may not do."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuyard.simulator import (
    Decision,
    Engine,
    JobStatus,
    Overhead,
    Partition,
    PolicyContext,
    SimulationError,
    Slot,
    StartJob,
    TraceJob,
    View,
)
from gpuyard.simulator.cluster import NodeClass
from gpuyard.simulator.reference import ReferencePolicy


def job(job_id: str, submit: float, gpus: int, duration: float) -> TraceJob:
    return TraceJob(job_id, "c", "u", "g", submit, gpus, duration)


class Scripted:
    """A policy that records what it saw and answers with ``plan(view)``."""

    def __init__(self, plan: Callable[[View], Decision]) -> None:
        self.plan = plan
        self.calls: list[tuple[float, list[str], list[str], list[str]]] = []

    def decide(self, view: View) -> Decision:
        self.calls.append(
            (
                view.now,
                [j.job_id for j in view.pending.values()],
                [j.job_id for j in view.submitted],
                [j.job_id for j in view.finished],
            )
        )
        return self.plan(view)


def fifo(partition: Partition, jobs: list[TraceJob]) -> Engine:
    return Engine(partition, jobs, ReferencePolicy(PolicyContext(partition), "fifo"))


def test_a_job_waits_for_room_and_finishes_after_its_duration() -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=4)
    result = fifo(partition, [job("a", 0, 2, 10), job("b", 1, 4, 5)]).run()
    a, b = result.jobs
    assert (a.first_start, a.end, a.queued) == (0, 10, 0)
    assert (b.first_start, b.end, b.queued) == (10, 15, 9)
    assert all(j.status is JobStatus.DONE for j in result.jobs)
    # b waited from 1 to 10 while 2 of 4 GPUs were allocated.
    assert result.waiting_seconds == 9
    assert result.allocated_while_waiting == 18
    assert result.allocated == 2 * 10 + 4 * 5


def test_a_gang_takes_whole_free_nodes_and_frees_them_all() -> None:
    partition = Partition.uniform("c", nodes=3, gpus_per_node=8)
    engine = fifo(partition, [job("small", 0, 1, 100), job("gang", 0, 16, 10)])
    seen: list[tuple[int, ...]] = []
    policy = engine.policy

    class Watch:
        def decide(self, view: View) -> Decision:
            decision = policy.decide(view)
            seen.extend(tuple(s.node for s in st.placement) for st in decision.starts)
            return decision

    engine.policy = Watch()
    result = engine.run()
    assert seen == [(0,), (1, 2)]
    assert result.jobs[1].end == 10
    assert engine.free == [8, 8, 8]


def test_preemption_requeues_and_adds_the_overhead_to_the_remaining_work() -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=8)

    def plan(view: View) -> Decision:
        if view.now == 0:
            return Decision(starts=[StartJob(0, (Slot(0, 8),))])
        if view.now == 10 and 0 in view.running:  # high arrives: suspend low, take its node
            return Decision(starts=[StartJob(1, (Slot(0, 8),))], preempts=[0])
        if view.now == 30 and 0 in view.pending:
            return Decision(starts=[StartJob(0, (Slot(0, 8),))])
        return Decision()

    engine = Engine(partition, [job("low", 0, 8, 100), job("high", 10, 8, 20)], Scripted(plan))
    low, high = engine.run().jobs
    # low ran 10 s, then 90 s of work + 40 s overhead after it resumed at 30.
    assert (low.end, low.queued, low.preemptions, low.ran) == (160, 20, 1, 140)
    assert (low.first_start, high.first_start, high.end) == (0, 10, 30)


def test_the_overhead_depends_on_the_job_size() -> None:
    partition = Partition.uniform("c", nodes=2, gpus_per_node=8)
    both = (Slot(0, 8), Slot(1, 8))

    def plan(view: View) -> Decision:
        if view.now == 0:  # with an empty queue the engine would not ask at 5: ask to be woken
            return Decision(starts=[StartJob(0, both)], wake_at=5)
        if view.now == 5 and 0 in view.running:
            return Decision(preempts=[0], wake_at=6)
        if view.now == 6:
            return Decision(starts=[StartJob(0, both)])
        return Decision()

    engine = Engine(
        partition, [job("gang", 0, 16, 50)], Scripted(plan), overhead=Overhead.small_large(3, 7)
    )
    (gang,) = engine.run().jobs
    assert Overhead.small_large(3, 7).of(8) == 3
    assert (gang.end, gang.queued, gang.preemptions) == (6 + 45 + 7, 1, 1)


def test_after_a_preemption_the_policy_is_asked_again_at_once() -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=8)

    def plan(view: View) -> Decision:
        if view.now == 0:
            return Decision(starts=[StartJob(0, (Slot(0, 8),))])
        if 0 in view.running:  # first call at 3: make room only
            return Decision(preempts=[0])
        if 1 in view.pending:  # the same instant, asked again: use the room
            return Decision(starts=[StartJob(1, (Slot(0, 8),))])
        return Decision(starts=[StartJob(0, (Slot(0, 8),))]) if 0 in view.pending else Decision()

    policy = Scripted(plan)
    low, high = Engine(partition, [job("low", 0, 8, 10), job("high", 3, 8, 4)], policy).run().jobs
    assert [c[0] for c in policy.calls] == [0, 3, 3, 7]
    assert (high.first_start, high.end) == (3, 7)
    assert (low.end, low.queued, low.preemptions) == (7 + 7 + 40, 4, 1)


def test_a_wake_up_calls_the_policy_without_an_event() -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=8)

    def plan(view: View) -> Decision:
        if view.now < 120:
            return Decision(wake_at=view.now + 60)
        return Decision(starts=[StartJob(0, (Slot(0, 1),))])

    policy = Scripted(plan)
    result = Engine(partition, [job("a", 0, 1, 5)], policy).run()
    assert [c[0] for c in policy.calls] == [0, 60, 120]
    assert (result.jobs[0].first_start, result.jobs[0].end) == (120, 125)


def test_idle_wake_ups_that_change_nothing_end_at_a_limit() -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=8)
    policy = Scripted(lambda view: Decision(wake_at=view.now + 1))
    engine = Engine(partition, [job("huge", 0, 16, 10)], policy, max_idle_wakes=50)
    (huge,) = engine.run().jobs
    assert (len(policy.calls), huge.status) == (51, JobStatus.PENDING)


def test_the_policy_is_asked_only_with_a_queue_and_sees_all_changes_since() -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=8)

    def plan(view: View) -> Decision:
        return Decision(starts=[StartJob(j.index, (Slot(0, 1),)) for j in view.submitted])

    policy = Scripted(plan)
    Engine(partition, [job("a", 0, 1, 5), job("b", 1, 1, 1), job("c", 10, 1, 1)], policy).run()
    # Finishes at 2 and 5 leave the queue empty: no call. The call at 10 reports both.
    assert policy.calls == [
        (0, ["a"], ["a"], []),
        (1, ["b"], ["b"], []),
        (10, ["c"], ["c"], ["b", "a"]),
    ]


def test_a_job_that_never_fits_stays_unfinished_and_the_replay_ends() -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=8)
    result = fifo(partition, [job("huge", 0, 16, 10), job("next", 1, 1, 10)]).run()
    assert [j.status for j in result.jobs] == [JobStatus.PENDING, JobStatus.PENDING]
    assert result.jobs[0].end is None


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (Decision(starts=[StartJob(0, (Slot(0, 9),))]), "has only 8 free GPUs"),
        (Decision(starts=[StartJob(0, (Slot(3, 1),))]), "no such slot"),
        (Decision(starts=[StartJob(0, (Slot(0, 1),))]), "needs 2 GPUs, got 1"),
        (Decision(starts=[StartJob(7, (Slot(0, 1),))]), "not pending"),
        (Decision(preempts=[0]), "not running"),
        (Decision(wake_at=0), "not after now"),
    ],
)
def test_an_impossible_decision_is_a_policy_bug(decision: Decision, message: str) -> None:
    partition = Partition.uniform("c", nodes=1, gpus_per_node=8)
    engine = Engine(partition, [job("a", 0, 2, 10)], Scripted(lambda view: decision))
    with pytest.raises(SimulationError, match=message):
        engine.run()
    assert engine.free == [8]  # nothing half-applied


def test_jobs_must_come_in_submit_order() -> None:
    partition = Partition.uniform("c", nodes=1)
    with pytest.raises(SimulationError, match="submit order"):
        fifo(partition, [job("a", 5, 1, 1), job("b", 0, 1, 1)])


def test_node_classes_expand_in_order_with_distinct_names() -> None:
    partition = Partition("c", (NodeClass("T4", 2, 2), NodeClass("A100", 1, 8)))
    assert [(n.name, n.gpus) for n in partition.nodes] == [
        ("T4-2g-0", 2),
        ("T4-2g-1", 2),
        ("A100-8g-0", 8),
    ]
    assert (partition.gpus, partition.largest_node) == (12, 8)
