"""Properties of every decision, over random pools, queues, running jobs, quotas and policies."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyard.models import Priority
from gpuyard.scheduler import (
    Decisions,
    Limit,
    Member,
    PendingJob,
    PoolPolicy,
    Preemption,
    Request,
    RunningJob,
    Snapshot,
    WaitCode,
    decide,
)
from gpuyard.scheduler.placement import Ledger
from gpuyard.testing.builders import job, node

OWNERS = ["alice", "bob", "carol"]
GROUPS = {"alice": "vision", "bob": "vision", "carol": "speech"}

nodes_strategy = st.lists(
    st.builds(
        lambda i, g, c, z: node(f"n{i}", gpus=g, cpus=c, memory=64 << 30, zone=z),
        st.integers(0, 10_000),
        st.integers(0, 8),
        st.integers(1, 16),
        st.sampled_from(["a", "b"]),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda n: n.name,
)


def _with_helpers(pending: PendingJob, helpers: int) -> PendingJob:
    """Add parameter-server-like members (small, shared) to a job's gang."""
    extra = (Member(0, 1, 1 << 30),) * helpers
    return replace(pending, request=Request(pending.request.members + extra))


def _job(
    i: int, g: int, n: int, c: int, p: Priority, h: int, owner: str, rt: int | None
) -> PendingJob:
    base = job(
        i, gpus=g, nodes=n, cpus=c, priority=p, owner=owner, group=GROUPS[owner], max_runtime=rt
    )
    return _with_helpers(base, h)


jobs_strategy = st.lists(
    st.builds(
        _job,
        st.integers(1, 10_000),
        st.integers(0, 8),
        st.integers(1, 3),
        st.integers(1, 8),
        st.sampled_from(list(Priority)),
        st.integers(0, 2),
        st.sampled_from(OWNERS),
        st.one_of(st.none(), st.integers(10, 1000)),
    ),
    max_size=30,
    unique_by=lambda j: j.id,
)

limits_strategy = st.dictionaries(
    st.tuples(
        st.sampled_from(["user", "group"]),
        st.sampled_from([*OWNERS, "vision", "speech"]),
        st.sampled_from([p.rank for p in Priority]),
    ),
    st.builds(
        Limit, st.one_of(st.none(), st.integers(0, 4)), st.one_of(st.none(), st.integers(0, 16))
    ),
    max_size=6,
)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """A valid pool state: running jobs placed for real on the nodes, then a queue."""
    nodes = draw(nodes_strategy)
    ledger = Ledger(nodes, ())
    running: list[RunningJob] = []
    for candidate in draw(jobs_strategy):
        allocations = ledger.place(candidate.request)
        if allocations is None or draw(st.booleans()):
            continue
        ledger.commit(allocations)
        running.append(
            RunningJob(
                id=candidate.id + 20_000,
                priority=candidate.priority,
                owner=candidate.owner,
                allocations=allocations,
                group=candidate.group,
                started_at=draw(st.integers(0, 500)),
                max_runtime=candidate.max_runtime,
                last_checkpoint=draw(st.one_of(st.none(), st.integers(0, 900))),
                suspending=draw(st.booleans()),
                preemptible=draw(st.booleans()),
            )
        )
    policy = PoolPolicy(
        preemption=draw(st.sampled_from(list(Preemption))), same_zone=draw(st.booleans())
    )
    return Snapshot(
        now=1000.0,
        nodes=tuple(nodes),
        pending=tuple(draw(jobs_strategy)),
        running=tuple(running),
        pools={policy.name: policy},
        quotas=draw(limits_strategy),
    )


def _request(snapshot: Snapshot, job_id: int, choice: int) -> Request:
    pending = next(j for j in snapshot.pending if j.id == job_id)
    return pending.choices()[choice]


@settings(max_examples=300, deadline=None)
@given(snapshot=snapshots())
def test_no_decision_over_commits_a_node(snapshot: Snapshot) -> None:
    decisions = decide(snapshot)
    capacity = {n.name: n for n in snapshot.nodes}
    gpus: dict[str, list[int]] = {n: [] for n in capacity}
    cpus = dict.fromkeys(capacity, 0.0)
    holders: Counter[str] = Counter()
    exclusive: set[str] = set()
    placed = [(r.allocations, None) for r in snapshot.running]
    for start in decisions.starts:
        request = _request(snapshot, start.job_id, start.choice)
        assert len(start.allocations) == request.nodes  # gang: all or nothing
        for a, member in zip(start.allocations, request.members, strict=True):
            assert len(a.gpus) == member.gpus
            assert a.exclusive == member.whole_node
            assert capacity[a.node].schedulable
        placed.append((start.allocations, start.job_id))
    for allocations, _ in placed:
        for a in allocations:
            holders[a.node] += 1
            gpus[a.node].extend(a.gpus)
            cpus[a.node] += a.cpus
            if a.exclusive:
                exclusive.add(a.node)
    for name, cap in capacity.items():
        assert len(gpus[name]) == len(set(gpus[name]))  # no GPU given twice
        assert all(0 <= g < cap.gpus for g in gpus[name])
        if name not in exclusive:
            assert cpus[name] <= cap.cpus + 1e-9
        else:
            assert holders[name] == 1  # a whole node holds exactly one job


@settings(max_examples=300, deadline=None)
@given(snapshot=snapshots())
def test_no_decision_breaks_a_quota(snapshot: Snapshot) -> None:
    decisions = decide(snapshot)
    before: Counter[tuple[str, str, int, str]] = Counter()
    for r in snapshot.running:
        for kind, name in (("user", r.owner), ("group", r.group)):
            before[(kind, name, r.priority, "nodes")] += r.nodes
            before[(kind, name, r.priority, "gpus")] += r.gpus
    after = Counter(before)
    tiers = {j.id: j for j in snapshot.pending}
    for start in decisions.starts:
        pending = tiers[start.job_id]
        request = _request(snapshot, start.job_id, start.choice)
        for kind, name in (("user", pending.owner), ("group", pending.group)):
            after[(kind, name, pending.priority, "nodes")] += request.nodes
            after[(kind, name, pending.priority, "gpus")] += request.gpus
    for (kind, name, tier), limit in snapshot.quotas.items():
        for what, cap in (("nodes", limit.nodes), ("gpus", limit.gpus)):
            key = (kind, name, tier, what)
            if cap is not None and after[key] != before[key]:
                assert after[key] <= cap, (key, before[key], after[key])


@settings(max_examples=300, deadline=None)
@given(snapshot=snapshots())
def test_victims_are_lower_tiers_that_may_be_suspended(snapshot: Snapshot) -> None:
    decisions: Decisions = decide(snapshot)
    running = {r.id: r for r in snapshot.running}
    pending = {j.id: j for j in snapshot.pending}
    victims = [p.job_id for p in decisions.preempts]
    assert len(victims) == len(set(victims))
    if snapshot.pool("default").preemption is Preemption.NEVER:
        assert victims == []
    for p in decisions.preempts:
        victim, job = running[p.job_id], pending[p.for_job]
        assert victim.priority < job.priority
        assert victim.preemptible and not victim.suspending
        assert decisions.waits[job.id].code is WaitCode.PREEMPTING
    started = {s.job_id for s in decisions.starts}
    assert started.isdisjoint(decisions.waits)  # every job: started or waiting, not both
    assert started | set(decisions.waits) == set(pending)


@settings(max_examples=200, deadline=None)
@given(snapshot=snapshots())
def test_a_job_that_fits_an_empty_pool_is_never_declared_unsatisfiable(snapshot: Snapshot) -> None:
    decisions = decide(snapshot)
    same_zone = snapshot.pool("default").same_zone
    empty = Ledger(snapshot.nodes, ())
    for wait in decisions.waits.values():
        if wait.code is WaitCode.UNSATISFIABLE:
            request = _request(snapshot, wait.job_id, 0)
            assert empty.place(request, same_zone=same_zone) is None
