"""The scheduling policy, one table per behaviour (Kueue/Volcano style): snapshot in,
decisions out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from gpuyard.models import Priority
from gpuyard.scheduler import (
    Decisions,
    Limit,
    Member,
    PoolPolicy,
    Preemption,
    Request,
    WaitCode,
    decide,
)
from gpuyard.testing.builders import alloc, job, node, running, snapshot, whole

HIGH, HIGHEST, LOW = Priority.HIGH, Priority.HIGHEST, Priority.LOW
SUSPEND = PoolPolicy(preemption=Preemption.SUSPEND)


def started(decisions: Decisions) -> dict[int, list[tuple[str, tuple[int, ...]]]]:
    return {s.job_id: [(a.node, a.gpus) for a in s.allocations] for s in decisions.starts}


def on(decisions: Decisions) -> dict[int, list[str]]:
    """Where each started job went, by node name only."""
    return {s.job_id: [a.node for a in s.allocations] for s in decisions.starts}


@dataclass
class Case:
    name: str
    nodes: list
    pending: list
    running: tuple = ()
    starts: dict = field(default_factory=dict)
    """job -> node names (or (node, gpus) pairs when ``exact``)."""
    waits: dict = field(default_factory=dict)
    preempts: set = field(default_factory=set)
    exact: bool = False
    now: float = 0.0
    pools: tuple = ()
    quotas: dict = field(default_factory=dict)
    shares: dict = field(default_factory=dict)


def check(case: Case) -> Decisions:
    decisions = decide(
        snapshot(
            case.nodes,
            case.pending,
            case.running,
            case.now,
            pools=case.pools,
            quotas=case.quotas,
            shares=case.shares,
        )
    )
    assert (started(decisions) if case.exact else on(decisions)) == case.starts
    assert {j: w.code for j, w in decisions.waits.items()} == case.waits
    assert {p.job_id for p in decisions.preempts} == case.preempts
    return decisions


def table(cases: list[Case]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("case", cases, ids=[c.name for c in cases])


# -- order: tiers, then fair share, then submission --------------------------------------------

ORDER = [
    Case(
        "priority tier first, then submission order",
        nodes=[node("n0", gpus=2)],
        pending=[job(1, gpus=1), job(2, gpus=1, priority=HIGH), job(3, gpus=1)],
        starts={2: [("n0", (0,))], 1: [("n0", (1,))]},
        waits={3: WaitCode.RESOURCES},
        exact=True,
    ),
    Case(
        "fair share: the owner who holds fewer GPUs goes first, whatever the submission order",
        nodes=[node("n0", gpus=4)],
        running=(running(9, alloc("n0", 2), owner="alice"),),
        pending=[job(1, gpus=2, owner="alice"), job(2, gpus=2, owner="bob")],
        starts={2: ["n0"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "fair share is live inside one cycle: owners alternate",
        nodes=[node("n0", gpus=3)],
        pending=[
            job(1, gpus=1, owner="alice"),
            job(2, gpus=1, owner="alice"),
            job(3, gpus=1, owner="bob"),
            job(4, gpus=1, owner="bob"),
        ],
        starts={1: ["n0"], 3: ["n0"], 2: ["n0"]},
        waits={4: WaitCode.RESOURCES},
    ),
    Case(
        "shares weigh usage: an owner with twice the share may hold twice as much",
        nodes=[node("n0", gpus=5)],
        running=(
            running(8, alloc("n0", 2), owner="alice"),
            running(9, alloc("n0", 1), owner="bob"),
        ),
        pending=[job(1, gpus=2, owner="bob", seq=1), job(2, gpus=2, owner="alice", seq=2)],
        shares={"alice": 3.0},
        starts={2: ["n0"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "a suspended job keeps its original position",
        nodes=[node("n0", gpus=1)],
        pending=[job(5, gpus=1), job(9, gpus=1, seq=2)],  # 9 was submitted second, then suspended
        starts={9: ["n0"]},
        waits={5: WaitCode.RESOURCES},
    ),
]


@table(ORDER)
def test_order(case: Case) -> None:
    check(case)


# -- placement: gangs, best fit, whole nodes, zones, pools --------------------------------------

PLACEMENT = [
    Case(
        "best fit: the node with the fewest GPUs left over",
        nodes=[node("big", gpus=8), node("small", gpus=2)],
        pending=[job(1, gpus=2), job(2, gpus=6)],
        starts={1: [("small", (0, 1))], 2: [("big", tuple(range(6)))]},
        exact=True,
    ),
    Case(
        "best fit counts what running jobs use",
        nodes=[node("a", gpus=8), node("b", gpus=8)],
        running=(running(9, alloc("b", 5)),),
        pending=[job(1, gpus=3)],
        starts={1: [("b", (5, 6, 7))]},
        exact=True,
    ),
    Case(
        "multi-node gangs take whole free nodes, all or nothing",
        nodes=[node("a"), node("b"), node("c")],
        running=(running(9, alloc("c", 1)),),
        pending=[job(1, gpus=8, nodes=2), job(2, gpus=8, nodes=2)],
        starts={1: ["a", "b"]},
        waits={2: WaitCode.RESOURCES},
    ),
    Case(
        "a partly used node is not whole: the gang waits",
        nodes=[node("a"), node("b")],
        running=(running(9, alloc("b", 1)),),
        pending=[job(1, gpus=1, nodes=2)],
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "whole nodes are exclusive: nothing else lands on them",
        nodes=[node("a"), node("b")],
        pending=[job(1, gpus=1, nodes=2), job(2, gpus=1)],
        starts={1: ["a", "b"]},
        waits={2: WaitCode.RESOURCES},
    ),
    Case(
        "whole-node gangs take the smallest nodes that hold them",
        nodes=[node("big", gpus=8), node("s1", gpus=2), node("s2", gpus=2)],
        pending=[job(1, gpus=2, nodes=2)],
        starts={1: ["s1", "s2"]},
    ),
    Case(
        "a job larger than any node never blocks the queue",
        nodes=[node("a")],
        pending=[job(1, gpus=16), job(2, nodes=3), job(3, gpus=8)],
        starts={3: ["a"]},
        waits={1: WaitCode.UNSATISFIABLE, 2: WaitCode.UNSATISFIABLE},
    ),
    Case(
        "cordoned nodes are not used",
        nodes=[node("a", schedulable=False), node("b", gpus=2)],
        pending=[job(1, gpus=2), job(2, gpus=4)],
        starts={1: ["b"]},
        waits={2: WaitCode.UNSATISFIABLE},
    ),
    Case(
        "CPUs and memory are resources too",
        nodes=[node("a", gpus=0, cpus=4, memory=8 << 30)],
        pending=[job(1, cpus=3), job(2, cpus=2), job(3, memory=1 << 30)],
        starts={1: ["a"], 3: ["a"]},
        waits={2: WaitCode.RESOURCES},
    ),
    Case(
        "an empty pool",
        nodes=[],
        pending=[job(1)],
        waits={1: WaitCode.UNSATISFIABLE},
    ),
    Case(
        "a dedicated pool's nodes serve only jobs that name it",
        nodes=[node("d1", pool="team-a"), node("g1", gpus=2)],
        pending=[job(1, gpus=4), job(2, gpus=4, pool="team-a"), job(3, gpus=2)],
        starts={2: ["d1"], 3: ["g1"]},
        waits={1: WaitCode.UNSATISFIABLE},
    ),
    Case(
        "named nodes, and a driver version, narrow the choice",
        nodes=[node("a", driver="535"), node("b", driver="550"), node("c", driver="550")],
        pending=[
            job(1, gpus=8, only=["c"]),
            job(2, gpus=8, driver="550"),
            job(3, gpus=1, driver="470"),
        ],
        starts={1: ["c"], 2: ["b"]},
        waits={3: WaitCode.POOL},
    ),
    Case(
        "a pool that does not exist is a pool constraint that can never be met",
        nodes=[node("a")],
        pending=[job(1, gpus=1, pool="nope")],
        waits={1: WaitCode.POOL},
    ),
    Case(
        "same-zone gangs stay in one zone: the zone that fits best",
        nodes=[
            node("a1", zone="a"),
            node("a2", zone="a"),
            node("a3", zone="a"),
            node("b1", zone="b"),
            node("b2", zone="b"),
        ],
        pending=[job(1, gpus=8, nodes=2), job(2, gpus=8, nodes=3)],
        pools=(PoolPolicy(same_zone=True),),
        starts={1: ["b1", "b2"], 2: ["a1", "a2", "a3"]},
    ),
    Case(
        "same-zone gangs wait rather than span zones",
        nodes=[node("a1", zone="a"), node("b1", zone="b")],
        pending=[job(1, gpus=8, nodes=2)],
        pools=(PoolPolicy(same_zone=True),),
        waits={1: WaitCode.UNSATISFIABLE},
    ),
    Case(
        "without the zone rule a gang spans zones",
        nodes=[node("a1", zone="a"), node("b1", zone="b")],
        pending=[job(1, gpus=8, nodes=2)],
        starts={1: ["a1", "b1"]},
    ),
]


@table(PLACEMENT)
def test_placement(case: Case) -> None:
    check(case)


def test_a_gang_with_helpers_places_whole_nodes_and_shares_the_rest() -> None:
    # Two whole-node workers plus two small parameter servers that go where they fit best.
    ps = Member(0, 1, 1 << 30)
    base = job(1, gpus=8, nodes=2)
    gang = replace(base, request=Request((*base.request.members, ps, ps)))
    nodes = [node("a"), node("b"), node("c", gpus=0, cpus=4)]
    [start] = decide(snapshot(nodes, [gang])).starts
    assert [(a.node, a.exclusive) for a in start.allocations] == [
        ("a", True),
        ("b", True),
        ("c", False),
        ("c", False),
    ]
    # Without room for the helpers, nothing of the gang starts.
    tight = decide(snapshot([node("a"), node("b")], [gang]))
    assert tight.starts == [] and tight.waits[1].code is WaitCode.UNSATISFIABLE


# -- quotas ------------------------------------------------------------------------------------

N, H = Priority.NORMAL.rank, HIGH.rank

QUOTAS = [
    Case(
        "a user at their node quota waits; others go on",
        nodes=[node("a"), node("b")],
        running=(running(9, alloc("a", 1), owner="alice"),),
        pending=[job(1, gpus=1, owner="alice"), job(2, gpus=1, owner="bob")],
        quotas={("user", "alice", N): Limit(nodes=1)},
        starts={2: ["a"]},
        waits={1: WaitCode.QUOTA},
    ),
    Case(
        "GPU quotas count GPUs",
        nodes=[node("a")],
        running=(running(9, alloc("a", 2), owner="alice"),),
        pending=[job(1, gpus=2, owner="alice"), job(2, gpus=1, owner="alice")],
        quotas={("user", "alice", N): Limit(gpus=3)},
        starts={2: ["a"]},
        waits={1: WaitCode.QUOTA},
    ),
    Case(
        "starts in the same cycle count against the quota",
        nodes=[node("a")],
        pending=[job(1, gpus=2), job(2, gpus=2)],
        quotas={("user", "alice", N): Limit(gpus=3)},
        starts={1: ["a"]},
        waits={2: WaitCode.QUOTA},
    ),
    Case(
        "a group's quota binds all its members together",
        nodes=[node("a")],
        running=(running(9, alloc("a", 4), owner="alice", group="vision"),),
        pending=[job(1, gpus=2, owner="bob", group="vision"), job(2, gpus=2, owner="carol")],
        quotas={("group", "vision", N): Limit(gpus=4)},
        starts={2: ["a"]},
        waits={1: WaitCode.QUOTA},
    ),
    Case(
        "quotas are per tier: the normal quota does not bind a high job",
        nodes=[node("a")],
        running=(running(9, alloc("a", 4), owner="alice"),),
        pending=[job(1, gpus=2, owner="alice", priority=HIGH), job(2, gpus=2, owner="alice")],
        quotas={("user", "alice", N): Limit(gpus=4), ("user", "alice", H): Limit(gpus=2)},
        starts={1: ["a"]},
        waits={2: WaitCode.QUOTA},
    ),
    Case(
        "a multi-node job needs room in the quota for all its nodes",
        nodes=[node("a"), node("b"), node("c")],
        pending=[job(1, gpus=8, nodes=3), job(2, gpus=8, nodes=2)],
        quotas={("user", "alice", N): Limit(nodes=2)},
        starts={2: ["a", "b"]},
        waits={1: WaitCode.QUOTA},
    ),
]


@table(QUOTAS)
def test_quotas(case: Case) -> None:
    check(case)


def test_the_quota_reason_names_the_limit() -> None:
    d = check(QUOTAS[0])
    assert d.waits[1].message == (
        "over quota: user alice may hold 1 node(s) at this tier, holds 1, and this job needs 1"
    )


# -- backfill: reservations for waiting jobs ---------------------------------------------------

BACKFILL = [
    Case(
        "a small job that ends before the blocked job's reserved start runs now",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2), max_runtime=100),),  # frees 2 GPUs at t=100
        pending=[job(1, gpus=4), job(2, gpus=2, max_runtime=50)],
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "one that would run past the reserved start waits: the room is held",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2), max_runtime=100),),
        pending=[job(1, gpus=4), job(2, gpus=2, max_runtime=500)],
        waits={1: WaitCode.RESOURCES, 2: WaitCode.RESERVED},
    ),
    Case(
        "one without a max runtime waits too",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2), max_runtime=100),),
        pending=[job(1, gpus=4), job(2, gpus=2)],
        waits={1: WaitCode.RESOURCES, 2: WaitCode.RESERVED},
    ),
    Case(
        "room the waiting job does not need is free for anyone",
        nodes=[node("a", gpus=4), node("b", gpus=4)],
        running=(running(8, alloc("a", 2), max_runtime=100), running(9, alloc("b", 3))),
        pending=[job(1, gpus=4), job(2, gpus=1)],
        starts={2: ["b"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "a waiting gang holds the nodes that free first; other nodes stay usable",
        nodes=[node("a"), node("b"), node("c")],
        running=(
            running(7, alloc("a", 1), max_runtime=100),
            running(8, alloc("b", 1), max_runtime=200),
            running(9, alloc("c", 1)),
        ),
        pending=[job(1, gpus=8, nodes=2), job(2, gpus=4)],
        starts={2: ["c"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "a higher tier's reservation shows as a priority wait",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2), max_runtime=100),),
        pending=[job(1, gpus=4, priority=HIGH), job(2, gpus=2)],
        waits={1: WaitCode.RESOURCES, 2: WaitCode.PRIORITY},
    ),
    Case(
        "with unknown run times the waiting job still holds what is free (no starvation)",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2)),),
        pending=[job(1, gpus=4), job(2, gpus=2)],
        waits={1: WaitCode.RESOURCES, 2: WaitCode.RESERVED},
    ),
    Case(
        "...but a job with a max runtime may use it: it ends before an unknown start",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2)),),
        pending=[job(1, gpus=4), job(2, gpus=2, max_runtime=60)],
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
]


@table(BACKFILL)
def test_backfill(case: Case) -> None:
    check(case)


def test_the_reservation_says_when_the_job_should_start() -> None:
    d = check(BACKFILL[1])
    assert d.waits[1].start_at == 100
    assert "expected to start in about 1m40s" in d.waits[1].message
    assert "held for job 1" in d.waits[2].message


# -- alternative specs ------------------------------------------------------------------------

ALTERNATIVES = [
    Case(
        "the first spec that fits starts; the others are dropped",
        nodes=[node("a", gpus=4)],
        pending=[job(1, gpus=8, alternatives=[Request.uniform(gpus=6), Request.uniform(gpus=4)])],
        starts={1: ["a"]},
    ),
    Case(
        "a spec that fits no node at all does not make the job unsatisfiable",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4)),),
        pending=[job(1, gpus=8, alternatives=[Request.uniform(gpus=2)])],
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "none fits any node: unsatisfiable",
        nodes=[node("a", gpus=4)],
        pending=[job(1, gpus=8, alternatives=[Request.uniform(gpus=6)])],
        waits={1: WaitCode.UNSATISFIABLE},
    ),
]


@table(ALTERNATIVES)
def test_alternative_specs(case: Case) -> None:
    check(case)


def test_the_start_says_which_spec_was_chosen() -> None:
    d = check(ALTERNATIVES[0])
    assert d.starts[0].choice == 2
    assert [len(a.gpus) for a in d.starts[0].allocations] == [4]


# -- elastic jobs ------------------------------------------------------------------------------

ELASTIC = [
    Case(
        "an elastic job starts with what is free, as many nodes as it may",
        nodes=[node("a"), node("b"), node("c")],
        running=(running(9, alloc("c", 1)),),
        pending=[job(1, gpus=8, nodes=4, min_nodes=1)],
        starts={1: ["a", "b"]},
    ),
    Case(
        "...and waits when fewer than its minimum are free",
        nodes=[node("a"), node("b")],
        running=(running(9, alloc("b", 1)),),
        pending=[job(1, gpus=8, nodes=4, min_nodes=2)],
        waits={1: WaitCode.RESOURCES},
    ),
]


@table(ELASTIC)
def test_elastic_start(case: Case) -> None:
    check(case)


def test_an_elastic_job_grows_when_idle_nodes_appear() -> None:
    elastic = running(5, whole("a"), whole("b"), started_at=0, min_nodes=1, max_nodes=4, version=3)
    nodes = [node("a"), node("b"), node("c"), node("d"), node("e")]
    d = decide(snapshot(nodes, [], [elastic], now=600))
    [grow] = d.grows
    assert (grow.job_id, grow.version, grow.nodes) == (5, 3, 4)
    # Not right after it started, and not into room a waiting job holds.
    assert decide(snapshot(nodes, [], [elastic], now=10)).grows == []
    blocker = running(9, alloc("c", 1), max_runtime=100)
    waiting = job(1, gpus=8, nodes=3)
    held = decide(snapshot(nodes, [waiting], [elastic, blocker], now=600))
    assert held.grows == [] and held.waits[1].code is WaitCode.RESOURCES


def test_an_elastic_job_shrinks_by_being_suspended_for_a_higher_tier() -> None:
    elastic = running(5, whole("a"), whole("b"), min_nodes=1, max_nodes=2)
    d = check(
        Case(
            "",
            nodes=[node("a"), node("b")],
            running=(elastic,),
            pending=[job(1, gpus=8, priority=HIGH)],
            pools=(SUSPEND,),
            waits={1: WaitCode.PREEMPTING},
            preempts={5},
        )
    )
    # Once it has left, the high job takes one node and the elastic job resumes on the other.
    resumed = job(5, gpus=8, nodes=2, min_nodes=1, seq=5)
    after = decide(snapshot([node("a"), node("b")], [job(1, gpus=8, priority=HIGH), resumed]))
    assert on(after) == {1: ["a"], 5: ["b"]}
    assert "job 1" in d.preempts[0].reason


# -- preemption --------------------------------------------------------------------------------

PREEMPTION = [
    Case(
        "in a never pool a higher tier only waits, and holds the room",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2)),),
        pending=[job(1, gpus=4, priority=HIGH), job(2, gpus=1)],
        waits={1: WaitCode.RESOURCES, 2: WaitCode.PRIORITY},
    ),
    Case(
        "in a suspend pool it suspends a lower tier",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4), priority=LOW),),
        pending=[job(1, gpus=4, priority=HIGH)],
        pools=(SUSPEND,),
        waits={1: WaitCode.PREEMPTING},
        preempts={9},
    ),
    Case(
        "never the same tier",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4)),),
        pending=[job(1, gpus=4)],
        pools=(SUSPEND,),
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "the victims that lose the least work since their last checkpoint",
        nodes=[node("a", gpus=4), node("b", gpus=4)],
        running=(
            running(8, alloc("a", 4), priority=LOW, started_at=0, last_checkpoint=900),
            running(9, alloc("b", 4), priority=LOW, started_at=0, last_checkpoint=500),
        ),
        pending=[job(1, gpus=4, priority=HIGH)],
        now=1000,
        pools=(SUSPEND,),
        waits={1: WaitCode.PREEMPTING},
        preempts={8},
    ),
    Case(
        "only as many victims as the room needs",
        nodes=[node("a", gpus=4)],
        running=(
            running(7, alloc("a", [0]), priority=LOW, started_at=10),
            running(8, alloc("a", [1]), priority=LOW, started_at=20),
            running(9, alloc("a", [2, 3]), priority=LOW, started_at=30),
        ),
        pending=[job(1, gpus=2, priority=HIGH)],
        now=100,
        pools=(SUSPEND,),
        waits={1: WaitCode.PREEMPTING},
        preempts={9},
    ),
    Case(
        "a gang needs whole nodes: every job on a chosen node goes",
        nodes=[node("a", gpus=2), node("b", gpus=2)],
        running=(
            running(7, alloc("a", 1), priority=LOW),
            running(8, alloc("a", [1]), priority=LOW),
            running(9, whole("b", 2), priority=LOW),
        ),
        pending=[job(1, gpus=2, nodes=2, priority=HIGHEST)],
        now=100,
        pools=(SUSPEND,),
        waits={1: WaitCode.PREEMPTING},
        preempts={7, 8, 9},
    ),
    Case(
        "jobs already suspending are waited for, not joined by new victims",
        nodes=[node("a", gpus=4)],
        running=(
            running(8, alloc("a", [0, 1]), priority=LOW, suspending=True),
            running(9, alloc("a", [2, 3]), priority=LOW),
        ),
        pending=[job(1, gpus=2, priority=HIGH)],
        pools=(SUSPEND,),
        waits={1: WaitCode.PREEMPTING},
    ),
    Case(
        "a job being launched is not a victim",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4), priority=LOW, preemptible=False),),
        pending=[job(1, gpus=4, priority=HIGH)],
        pools=(SUSPEND,),
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "room held for a preempting job is not taken by a lower one meanwhile",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", [0, 1]), priority=LOW),),
        pending=[job(1, gpus=4, priority=HIGH), job(2, gpus=2, priority=LOW)],
        pools=(SUSPEND,),
        waits={1: WaitCode.PREEMPTING, 2: WaitCode.PRIORITY},
        preempts={9},
    ),
    Case(
        "two preemptors never pick the same victim",
        nodes=[node("a", gpus=4), node("b", gpus=4)],
        running=(running(8, alloc("a", 4), priority=LOW), running(9, alloc("b", 4), priority=LOW)),
        pending=[job(1, gpus=4, priority=HIGH), job(2, gpus=4, priority=HIGH)],
        pools=(SUSPEND,),
        waits={1: WaitCode.PREEMPTING, 2: WaitCode.PREEMPTING},
        preempts={8, 9},
    ),
]


@table(PREEMPTION)
def test_preemption(case: Case) -> None:
    check(case)


def test_preemption_carries_the_victim_version_and_a_reason() -> None:
    d = decide(
        snapshot(
            [node("a", gpus=4)],
            [job(1, gpus=4, priority=HIGH)],
            [running(9, alloc("a", 4), priority=LOW, version=4)],
            pools=[SUSPEND],
        )
    )
    [p] = d.preempts
    assert (p.job_id, p.version, p.for_job) == (9, 4, 1)
    assert "job 9" in d.waits[1].message and "suspend" in d.waits[1].message


# -- reasons -----------------------------------------------------------------------------------


def test_waiting_reasons_are_readable() -> None:
    d = decide(
        snapshot(
            [node("a", gpus=4)],
            [job(1, gpus=5), job(2, gpus=4), job(3, gpus=4), job(4, gpus=1, pool="x")],
            [running(9, alloc("a", 1))],
        )
    )
    assert "no node has 5 GPUs" in d.waits[1].message
    assert "largest: 4 GPUs" in d.waits[1].message
    assert "a node with 4 free GPUs" in d.waits[2].message
    assert d.waits[3].message.endswith("behind job 2, which goes first")
    assert d.waits[4].message == "the pool has no schedulable nodes in pool 'x'"


def test_starts_carry_the_version_read_for_guarded_writes() -> None:
    assert decide(snapshot([node("a")], [job(1, version=7)])).starts[0].version == 7


# -- time-slicing inside a tier ----------------------------------------------------------------

SLICED = PoolPolicy(preemption=Preemption.SUSPEND, slices=(3600.0, 36000.0))
GPU_HOUR = 3600.0


def test_bands_split_a_tier_by_service_had() -> None:
    assert [SLICED.band(x) for x in (0, 3599, 3600, 40000)] == [0, 0, 1, 2]
    assert PoolPolicy().band(1e9) == 0


def test_aging_halves_service_per_half_life_of_at_least_the_time_run() -> None:
    aging = replace(SLICED, age_halflife=100.0)
    assert aging.aged(800.0, 200.0, gpus=8) == 200.0  # ran 100 s: half-life 100 s
    assert aging.aged(800.0, 200.0, gpus=1) == pytest.approx(800 * 0.5**0.25)  # half-life 800 s
    assert SLICED.aged(800.0, 1e9) == 800.0  # no aging
    assert [replace(SLICED, min_run=60.0).quantum(k) for k in (0, 1, 3)] == [60, 120, 480]


TIME_SLICING = [
    Case(
        "the less served job goes first inside a tier, whatever the submission order",
        nodes=[node("a", gpus=1)],
        pending=[replace(job(1, gpus=1), attained=5 * GPU_HOUR), job(2, gpus=1)],
        pools=(replace(SLICED, preemption=Preemption.NEVER),),
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "a new job suspends a job of its own tier that has had more service",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4), started_at=0, saves_on_notice=True),),
        pending=[job(1, gpus=4)],
        now=2 * GPU_HOUR,  # job 9 has had 8 GPU-hours: band 1
        pools=(SLICED,),
        waits={1: WaitCode.PREEMPTING},
        preempts={9},
    ),
    Case(
        "...but not one in its own band",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4), started_at=0),),
        pending=[job(1, gpus=4)],
        now=600,  # 40 GPU-minutes: band 0
        pools=(SLICED,),
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "the most served victim goes first when none loses work",
        nodes=[node("a", gpus=2), node("b", gpus=2)],
        running=(
            running(8, alloc("a", 2), started_at=0, saves_on_notice=True),
            running(9, alloc("b", 2), started_at=0, saves_on_notice=True, attained=50 * GPU_HOUR),
        ),
        pending=[job(1, gpus=2)],
        now=3 * GPU_HOUR,
        pools=(SLICED,),
        waits={1: WaitCode.PREEMPTING},
        preempts={9},
    ),
    Case(
        "a higher tier still beats any band",
        nodes=[node("a", gpus=1)],
        pending=[job(1, gpus=1), replace(job(2, gpus=1, priority=HIGH), attained=1e6)],
        pools=(SLICED,),
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "aging: a served job that has waited long enough goes before a fresher one",
        nodes=[node("a", gpus=1)],
        pending=[
            # 5 GPU-hours (band 1), ran 5 h, waited 20 h: a 16th of it, band 0
            replace(job(1, gpus=1), attained=5 * GPU_HOUR, queued_since=0.0),
            # half a GPU-hour (band 0), just requeued
            replace(job(2, gpus=1), attained=0.5 * GPU_HOUR, queued_since=20 * GPU_HOUR),
        ],
        now=20 * GPU_HOUR,
        pools=(replace(SLICED, preemption=Preemption.NEVER, age_halflife=GPU_HOUR),),
        starts={1: ["a"]},
        waits={2: WaitCode.RESOURCES},
    ),
    Case(
        "...and without aging the less served one goes first",
        nodes=[node("a", gpus=1)],
        pending=[
            replace(job(1, gpus=1), attained=5 * GPU_HOUR, queued_since=0.0),
            replace(job(2, gpus=1), attained=0.5 * GPU_HOUR, queued_since=20 * GPU_HOUR),
        ],
        now=20 * GPU_HOUR,
        pools=(replace(SLICED, preemption=Preemption.NEVER),),
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "aging is relative to the time run: a job that ran 5 h is not brought back after 1 h",
        nodes=[node("a", gpus=1)],
        pending=[
            replace(job(1, gpus=1), attained=5 * GPU_HOUR, queued_since=19 * GPU_HOUR),
            replace(job(2, gpus=1), attained=0.5 * GPU_HOUR, queued_since=20 * GPU_HOUR),
        ],
        now=20 * GPU_HOUR,
        pools=(replace(SLICED, preemption=Preemption.NEVER, age_halflife=60.0),),
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "quantum: a job of its own tier does not suspend a job before it has run min_run",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4), started_at=0, saves_on_notice=True, attained=1e6),),
        pending=[job(1, gpus=4)],
        now=1800,
        pools=(replace(SLICED, min_run=3600.0),),
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "...doubled for each suspension it has had",
        nodes=[node("a", gpus=4)],
        running=(
            replace(
                running(9, alloc("a", 4), started_at=0, saves_on_notice=True, attained=1e6),
                suspensions=2,
            ),
        ),
        pending=[job(1, gpus=4)],
        now=3 * 3600,  # under 4 h
        pools=(replace(SLICED, min_run=3600.0),),
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "...and past it, the job may be suspended",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4), started_at=0, saves_on_notice=True, attained=1e6),),
        pending=[job(1, gpus=4)],
        now=3601,
        pools=(replace(SLICED, min_run=3600.0),),
        waits={1: WaitCode.PREEMPTING},
        preempts={9},
    ),
    Case(
        "a higher tier is not held back by the quantum",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 4), started_at=0, saves_on_notice=True),),
        pending=[job(1, gpus=4, priority=HIGH)],
        now=60,
        pools=(replace(SLICED, min_run=3600.0),),
        waits={1: WaitCode.PREEMPTING},
        preempts={9},
    ),
    Case(
        "a time-sliced pool holds no room for a start it cannot time (no drained nodes)",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2)),),
        pending=[job(1, gpus=4), job(2, gpus=2)],
        pools=(replace(SLICED, preemption=Preemption.NEVER),),
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
]


@table(TIME_SLICING)
def test_time_slicing(case: Case) -> None:
    check(case)


def test_a_victim_that_saves_on_notice_loses_no_work() -> None:
    listening = running(9, alloc("a", 1), started_at=0, saves_on_notice=True)
    deaf = running(8, alloc("a", 1), started_at=0, last_checkpoint=50)
    assert (listening.lost_work(100), deaf.lost_work(100)) == (0.0, 50.0)


# -- predicted run times (docs/scheduling.md#predicted-run-times) -----------------------------

PREDICTED = [
    Case(
        "a predicted end times the reservation, and a job predicted to end before it backfills",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2), predicted_end=3600),),
        pending=[job(1, gpus=4, priority=HIGH), job(2, gpus=2, predicted=600)],
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "a job predicted to run past the reservation does not backfill",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2), predicted_end=3600),),
        pending=[job(1, gpus=4, priority=HIGH), job(2, gpus=2, predicted=7200)],
        waits={1: WaitCode.RESOURCES, 2: WaitCode.PRIORITY},
    ),
    Case(
        "a max runtime outranks a prediction",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2), predicted_end=3600),),
        pending=[job(1, gpus=4, priority=HIGH), job(2, gpus=2, predicted=600, max_runtime=7200)],
        waits={1: WaitCode.RESOURCES, 2: WaitCode.PRIORITY},
    ),
    Case(
        "the smallest predicted job goes first, whoever submitted first",
        nodes=[node("a", gpus=4)],
        pending=[job(1, gpus=4, predicted=7200), job(2, gpus=4, predicted=600, owner="bob")],
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "size is GPU-time: one GPU for two hours is smaller than four for one",
        nodes=[node("a", gpus=4)],
        pending=[job(1, gpus=4, predicted=3600), job(2, gpus=1, predicted=7200, owner="bob")],
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "an owner who holds GPUs waits behind others' jobs of the same size",
        nodes=[node("a", gpus=4), node("b", gpus=1)],
        running=(running(9, alloc("a", 4)),),
        pending=[job(1, gpus=1, predicted=600), job(2, gpus=1, predicted=600, owner="bob")],
        starts={2: ["b"]},
        waits={1: WaitCode.RESOURCES},
    ),
    Case(
        "a long wait shrinks a job's size: it goes first in the end",
        nodes=[node("a", gpus=4)],
        pending=[
            job(1, gpus=4, predicted=7200, queued_since=0),
            job(2, gpus=4, predicted=600, owner="bob", queued_since=12 * 3600),
        ],
        now=12 * 3600,
        starts={1: ["a"]},
        waits={2: WaitCode.RESOURCES},
    ),
    Case(
        "in a time-sliced pool a prediction holds no room (the bands need no drain)",
        nodes=[node("a", gpus=4)],
        running=(running(9, alloc("a", 2), predicted_end=3600),),
        pending=[job(1, gpus=4, predicted=600), job(2, gpus=2, predicted=7200)],
        pools=(SLICED,),
        starts={2: ["a"]},
        waits={1: WaitCode.RESOURCES},
    ),
]


@table(PREDICTED)
def test_predicted_run_times(case: Case) -> None:
    check(case)


def test_a_reservation_behind_a_predicted_end_says_when() -> None:
    decisions = check(PREDICTED[1])
    assert decisions.waits[1].start_at == 3600
    assert "expected to start in about 1h" in decisions.waits[1].message


def test_a_suspended_job_resumes_before_smaller_jobs_submitted_after_it() -> None:
    suspended = replace(job(1, gpus=4, predicted=7200), attained=4 * 600.0)
    decisions = check(
        Case(
            "requeued at its place",
            nodes=[node("a", gpus=4)],
            pending=[suspended, job(2, gpus=4, predicted=60)],
            starts={1: ["a"]},
            waits={2: WaitCode.RESOURCES},
        )
    )
    assert decisions.starts[0].job_id == 1


def test_in_a_time_sliced_pool_a_suspended_job_counts_what_it_has_left() -> None:
    """The bands rank it by the service it had; inside its band, size decides as for others."""
    suspended = replace(job(1, gpus=4, predicted=7200), attained=4 * 600.0)  # band 0 still
    check(
        Case(
            "smaller first, suspended or not",
            nodes=[node("a", gpus=4)],
            pending=[suspended, job(2, gpus=4, predicted=60)],
            pools=(SLICED,),
            starts={2: ["a"]},
            waits={1: WaitCode.RESOURCES},
        )
    )
