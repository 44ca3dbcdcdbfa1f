"""Scheduler v1, one table per behaviour: order, gangs, best fit, whole nodes, blocking."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyard.models import Priority
from gpuyard.scheduler import Allocation, Member, PendingJob, Request, WaitCode, decide
from gpuyard.scheduler.placement import Ledger
from gpuyard.testing.builders import job, node, running, snapshot


def started(decisions: object) -> dict[int, list[tuple[str, tuple[int, ...]]]]:
    return {s.job_id: [(a.node, a.gpus) for a in s.allocations] for s in decisions.starts}  # type: ignore[attr-defined]


@dataclass
class Case:
    name: str
    nodes: list
    pending: list
    running: tuple = ()
    starts: dict | None = None
    waits: dict | None = None


CASES = [
    Case(
        "priority tier first, then submission order",
        nodes=[node("n0", gpus=2)],
        pending=[job(1, gpus=1), job(2, gpus=1, priority=Priority.HIGH), job(3, gpus=1)],
        starts={2: [("n0", (0,))], 1: [("n0", (1,))]},
        waits={3: WaitCode.RESOURCES},
    ),
    Case(
        "a waiting job blocks every job behind it (no backfill yet)",
        nodes=[node("n0", gpus=4)],
        pending=[job(1, gpus=3), job(2, gpus=2), job(3, gpus=1)],
        starts={1: [("n0", (0, 1, 2))]},
        waits={2: WaitCode.RESOURCES, 3: WaitCode.BLOCKED},
    ),
    Case(
        "a higher tier that waits blocks lower tiers",
        nodes=[node("n0", gpus=4)],
        running=(running(9, Allocation("n0", (0, 1), 1, 0)),),
        pending=[job(1, gpus=1), job(2, gpus=4, priority=Priority.HIGHEST)],
        starts={},
        waits={2: WaitCode.RESOURCES, 1: WaitCode.BLOCKED},
    ),
    Case(
        "best fit: the node with the fewest GPUs left over",
        nodes=[node("big", gpus=8), node("small", gpus=2)],
        pending=[job(1, gpus=2), job(2, gpus=6)],
        starts={1: [("small", (0, 1))], 2: [("big", tuple(range(6)))]},
    ),
    Case(
        "best fit counts what running jobs use",
        nodes=[node("a", gpus=8), node("b", gpus=8)],
        running=(running(9, Allocation("b", (0, 1, 2, 3, 4), 1, 0)),),
        pending=[job(1, gpus=3)],
        starts={1: [("b", (5, 6, 7))]},
    ),
    Case(
        "multi-node gangs take whole free nodes, all or nothing",
        nodes=[node("a", gpus=8), node("b", gpus=8), node("c", gpus=8)],
        running=(running(9, Allocation("c", (0,), 1, 0)),),
        pending=[job(1, gpus=8, nodes=2), job(2, gpus=8, nodes=2)],
        starts={1: [("a", tuple(range(8))), ("b", tuple(range(8)))]},
        waits={2: WaitCode.RESOURCES},
    ),
    Case(
        "a partly used node is not whole: the gang waits",
        nodes=[node("a", gpus=8), node("b", gpus=8)],
        running=(running(9, Allocation("b", (0,), 1, 0)),),
        pending=[job(1, gpus=1, nodes=2)],
        starts={},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "whole nodes are exclusive: nothing else lands on them",
        nodes=[node("a", gpus=8), node("b", gpus=8)],
        pending=[job(1, gpus=1, nodes=2), job(2, gpus=1)],
        starts={1: [("a", (0,)), ("b", (0,))]},
        waits={2: WaitCode.RESOURCES},
    ),
    Case(
        "a job larger than any node never blocks the queue",
        nodes=[node("a", gpus=8)],
        pending=[job(1, gpus=16), job(2, nodes=3), job(3, gpus=8)],
        starts={3: [("a", tuple(range(8)))]},
        waits={1: WaitCode.UNSATISFIABLE, 2: WaitCode.UNSATISFIABLE},
    ),
    Case(
        "cordoned nodes are not used",
        nodes=[node("a", gpus=8, schedulable=False), node("b", gpus=2)],
        pending=[job(1, gpus=2), job(2, gpus=4)],
        starts={1: [("b", (0, 1))]},
        waits={2: WaitCode.UNSATISFIABLE},
    ),
    Case(
        "CPUs and memory are resources too",
        nodes=[node("a", gpus=0, cpus=4, memory=8 << 30)],
        pending=[job(1, cpus=3), job(2, cpus=2), job(3, memory=1)],
        starts={1: [("a", ())]},
        waits={2: WaitCode.RESOURCES, 3: WaitCode.BLOCKED},
    ),
    Case(
        "an empty pool",
        nodes=[],
        pending=[job(1)],
        starts={},
        waits={1: WaitCode.UNSATISFIABLE},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decide(case: Case) -> None:
    decisions = decide(snapshot(case.nodes, case.pending, case.running))
    assert started(decisions) == (case.starts or {})
    assert {j: w.code for j, w in decisions.waits.items()} == (case.waits or {})


def test_starts_carry_the_version_read_for_guarded_writes() -> None:
    decisions = decide(snapshot([node("a")], [job(1, version=7)]))
    assert decisions.starts[0].version == 7


def test_waiting_reasons_are_readable() -> None:
    decisions = decide(
        snapshot(
            [node("a", gpus=4)],
            [job(1, gpus=5), job(2, gpus=4), job(3, gpus=4)],
            [running(9, Allocation("a", (0,), 1, 0))],
        )
    )
    assert "no node has 5 GPUs" in decisions.waits[1].message
    assert "largest: 4 GPUs" in decisions.waits[1].message
    assert "free GPUs" in decisions.waits[2].message
    assert "behind job 2" in decisions.waits[3].message


# -- properties ----------------------------------------------------------------------------

nodes_strategy = st.lists(
    st.builds(
        lambda i, g, c: node(f"n{i}", gpus=g, cpus=c, memory=64 << 30),
        st.integers(0, 10_000),
        st.integers(0, 8),
        st.integers(1, 16),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda n: n.name,
)


def _with_helpers(pending: PendingJob, helpers: int) -> PendingJob:
    """Add parameter-server-like members (small, shared) to a job's gang."""
    extra = (Member(0, 1, 1 << 30),) * helpers
    return replace(pending, request=Request(pending.request.members + extra))


jobs_strategy = st.lists(
    st.builds(
        lambda i, g, n, c, p, h: _with_helpers(job(i, gpus=g, nodes=n, cpus=c, priority=p), h),
        st.integers(1, 10_000),
        st.integers(0, 8),
        st.integers(1, 3),
        st.integers(1, 8),
        st.sampled_from(list(Priority)),
        st.integers(0, 2),
    ),
    max_size=30,
    unique_by=lambda j: j.id,
)


@settings(max_examples=300, deadline=None)
@given(nodes=nodes_strategy, pending=jobs_strategy)
def test_no_decision_over_commits_a_node(nodes: list, pending: list) -> None:
    decisions = decide(snapshot(nodes, pending))
    capacity = {n.name: n for n in nodes}
    used_gpus: dict[str, list[int]] = {n.name: [] for n in nodes}
    used_cpus = dict.fromkeys(capacity, 0.0)
    exclusive_holders: dict[str, int] = {}
    holders = dict.fromkeys(capacity, 0)
    requests = {j.id: j.request for j in pending}
    for start in decisions.starts:
        request = requests[start.job_id]
        assert len(start.allocations) == request.nodes  # gang: all or nothing
        whole = [
            a.node for a, m in zip(start.allocations, request.members, strict=True) if m.whole_node
        ]
        assert len(set(whole)) == len(whole)  # whole-node members never share a node
        for a, member in zip(start.allocations, request.members, strict=True):
            assert len(a.gpus) == member.gpus
            assert a.exclusive == member.whole_node
            holders[a.node] += 1
            if a.exclusive:
                exclusive_holders[a.node] = start.job_id
            used_gpus[a.node].extend(a.gpus)
            used_cpus[a.node] += a.cpus
    for name, cap in capacity.items():
        assert len(used_gpus[name]) == len(set(used_gpus[name]))  # no GPU given twice
        assert all(0 <= g < cap.gpus for g in used_gpus[name])
        assert used_cpus[name] <= cap.cpus + 1e-9
        if name in exclusive_holders:
            assert holders[name] == 1  # a whole node holds exactly one job


@settings(max_examples=200, deadline=None)
@given(nodes=nodes_strategy, pending=jobs_strategy)
def test_a_job_that_fits_an_empty_pool_is_never_declared_unsatisfiable(
    nodes: list, pending: list
) -> None:
    decisions = decide(snapshot(nodes, pending))
    for wait in decisions.waits.values():
        if wait.code is WaitCode.UNSATISFIABLE:
            request = next(j.request for j in pending if j.id == wait.job_id)
            assert Ledger(nodes, ()).place(request) is None


def test_a_gang_with_helpers_places_whole_nodes_and_shares_the_rest() -> None:
    # Two whole-node workers plus two small parameter servers that go where they fit best.
    ps = Member(0, 1, 1 << 30)
    gang = replace(
        job(1, gpus=8, nodes=2), request=Request((*job(1, gpus=8, nodes=2).request.members, ps, ps))
    )
    nodes = [node("a", gpus=8), node("b", gpus=8), node("c", gpus=0, cpus=4)]
    decisions = decide(snapshot(nodes, [gang]))
    [start] = decisions.starts
    assert [(a.node, a.exclusive) for a in start.allocations] == [
        ("a", True),
        ("b", True),
        ("c", False),
        ("c", False),
    ]
    # Without room for the helpers, nothing of the gang starts.
    tight = decide(snapshot([node("a", gpus=8), node("b", gpus=8)], [gang]))
    assert tight.starts == [] and tight.waits[1].code is WaitCode.UNSATISFIABLE
