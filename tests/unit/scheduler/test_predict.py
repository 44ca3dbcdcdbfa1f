"""Queue prediction: decide() run forward with max runtimes as run times."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyard.models import Priority
from gpuyard.scheduler import (
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
from gpuyard.scheduler.predict import Budget, forecast, in_words, predict
from gpuyard.testing.builders import alloc, job, node, running, snapshot, whole


def test_a_job_that_fits_starts_now() -> None:
    forecast = predict(snapshot([node("a")], [job(1, gpus=2)]), 1)
    assert (forecast.now, forecast.start_at) == (True, 0.0)
    assert in_words(forecast, 0.0) == "starts now"


def test_it_starts_when_the_running_job_reaches_its_max_runtime() -> None:
    s = snapshot(
        [node("a", gpus=4)], [job(1, gpus=4)], [running(9, alloc("a", 2), max_runtime=300)]
    )
    forecast = predict(s, 1)
    assert (forecast.now, forecast.start_at, forecast.waits_for) == (False, 300.0, (9,))
    assert in_words(forecast, 0.0) == "starts in about 5m00s"


def test_behind_queued_jobs_that_go_first() -> None:
    s = snapshot(
        [node("a", gpus=4)],
        [job(1, gpus=4, max_runtime=600), job(2, gpus=4, max_runtime=60), job(3, gpus=4)],
        [running(9, alloc("a", 4), max_runtime=100)],
        now=50,
    )
    forecast = predict(s, 3)
    # 9 ends at 100; job 1 runs 100..700; job 2 runs 700..760; then job 3.
    assert forecast.start_at == 760.0
    assert forecast.ahead == (1, 2)
    assert in_words(forecast, 50.0) == "starts in about 11m50s, behind jobs 1, 2"


def test_backfill_is_part_of_the_prediction() -> None:
    s = snapshot(
        [node("a", gpus=4)],
        [job(1, gpus=4), job(2, gpus=2, max_runtime=50)],
        [running(9, alloc("a", 2), max_runtime=100)],
    )
    assert predict(s, 2).now
    assert predict(s, 1).start_at == 100.0


def test_no_time_when_it_waits_for_a_job_without_a_max_runtime() -> None:
    s = snapshot([node("a", gpus=4)], [job(1, gpus=4)], [running(9, alloc("a", 2))])
    forecast = predict(s, 1)
    assert (forecast.start_at, forecast.unknown, forecast.waits_for) == (None, True, (9,))
    assert in_words(forecast, 0.0) == (
        "no start time can be given: it waits for job 9, with no max runtime"
    )


def test_a_job_that_can_never_run_says_why() -> None:
    forecast = predict(snapshot([node("a", gpus=4)], [job(1, gpus=8)]), 1)
    assert forecast.never is not None and "no node has 8 GPUs" in forecast.never


def test_a_higher_tier_in_a_suspend_pool_starts_once_its_victims_have_left() -> None:
    s = snapshot(
        [node("a")],
        [job(1, gpus=8, priority=Priority.HIGH, max_runtime=100)],
        [running(9, whole("a"), priority=Priority.LOW)],
        now=10,
        pools=[PoolPolicy(preemption=Preemption.SUSPEND)],
    )
    forecast = predict(s, 1)
    # The victim is told to suspend now; once it has left (at the next step) job 1 starts.
    assert forecast.start_at == 10.0 and not forecast.now


# -- forecast: every queued job from one replay ------------------------------------------------


def _sequential(queued: int = 5) -> Snapshot:
    """One node; job 9 holds it until 100; then each queued job in turn, for 100 s each:
    job k starts at 100 k, in the (k + 1)-th scheduling step."""
    return snapshot(
        [node("a", gpus=4)],
        [job(k, gpus=4, max_runtime=100) for k in range(1, queued + 1)],
        [running(9, alloc("a", 4), max_runtime=100)],
    )


def test_a_forecast_answers_for_every_queued_job_as_predict_does() -> None:
    s = _sequential()
    found = forecast(s)
    assert list(found) == [1, 2, 3, 4, 5]
    assert [found[k].start_at for k in found] == [100.0, 200.0, 300.0, 400.0, 500.0]
    assert found[3].ahead == (1, 2) and found[3].waits_for == (1, 2, 9)
    for k, f in found.items():
        assert f == predict(s, k)


def test_the_steps_bound_leaves_the_jobs_it_did_not_reach_unknown_and_says_why() -> None:
    found = forecast(_sequential(), max_steps=3)
    assert [found[k].start_at for k in (1, 2)] == [100.0, 200.0]
    late = found[3]
    assert (late.start_at, late.unknown, late.ahead) == (None, True, (1, 2))
    assert late.stopped == "within 3 scheduling steps"
    assert in_words(late, 0.0) == (
        "no start time can be given within 3 scheduling steps, behind jobs 1, 2"
    )


def test_a_budget_of_job_considerations_bounds_the_replay() -> None:
    # Cycles consider 5, 5, 4, 3 … queued jobs: 10 allow two cycles, so job 1 only.
    found = forecast(_sequential(), budget=Budget(considered=10))
    assert found[1].start_at == 100.0
    assert all(found[k].unknown for k in (2, 3, 4, 5))
    assert found[2].stopped == (
        "within the forecast's budget of 10 job-considerations (2 scheduling steps)"
    )


def test_a_time_budget_reads_the_clock_it_is_given() -> None:
    ticks = iter(range(100))  # each reading is one second later
    found = forecast(_sequential(), budget=Budget(seconds=2.5, clock=lambda: next(ticks)))
    # Read at the start (0), then before each cycle: 1 and 2 let two cycles run, 3 stops.
    assert found[1].start_at == 100.0 and found[2].unknown
    assert found[2].stopped is not None and "2.5 s" in found[2].stopped


def test_a_time_budget_without_a_clock_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a clock"):
        Budget(seconds=1.0)


def test_jobs_that_never_fit_and_jobs_behind_unending_ones_are_answered_too() -> None:
    s = snapshot(
        [node("a", gpus=4)],
        [job(1, gpus=8), job(2, gpus=4)],
        [running(9, alloc("a", 2))],
    )
    found = forecast(s)
    assert found[1].never is not None and "no node has 8 GPUs" in found[1].never
    assert (found[2].unknown, found[2].waits_for, found[2].stopped) == (True, (9,), None)


_OWNERS = ["alice", "bob"]


@st.composite
def _pools(draw: st.DrawFn) -> Snapshot:
    """A small pool with running jobs placed for real, and a queue of varied jobs: tiers,
    owners, gangs, alternatives, elastic sizes, max runtimes (mostly set, so that starts
    can be timed), under a random pool policy."""
    nodes = [
        node(f"n{i}", gpus=draw(st.sampled_from([0, 4, 8])), cpus=16, zone=zone)
        for i, zone in enumerate(draw(st.lists(st.sampled_from("ab"), min_size=1, max_size=5)))
    ]
    runtimes = st.one_of(st.none(), st.sampled_from([50, 100, 300]), st.sampled_from([60, 200]))
    ledger = Ledger(nodes, ())
    held = []
    for i in range(draw(st.integers(0, 5))):
        request = Request.uniform(
            nodes=draw(st.integers(1, 2)), gpus=draw(st.integers(0, 8)), cpus=2
        )
        placed = ledger.place(request)
        if placed is not None:
            ledger.commit(placed)
            held.append(
                running(
                    100 + i,
                    *placed,
                    priority=draw(st.sampled_from([Priority.LOW, Priority.NORMAL])),
                    owner=draw(st.sampled_from(_OWNERS)),
                    max_runtime=draw(runtimes),
                    suspending=draw(st.booleans()) and i == 0,
                )
            )
    queued = []
    for k in range(1, draw(st.integers(1, 8)) + 1):
        n = draw(st.integers(1, 3))
        queued.append(
            job(
                k,
                gpus=draw(st.sampled_from([0, 1, 2, 4, 8, 9])),
                nodes=n,
                cpus=2,
                priority=draw(st.sampled_from(list(Priority))),
                owner=draw(st.sampled_from(_OWNERS)),
                max_runtime=draw(runtimes),
                alternatives=[Request.uniform(nodes=n, gpus=1, cpus=2)]
                if draw(st.booleans())
                else [],
                min_nodes=1 if n > 1 and draw(st.booleans()) else None,
            )
        )
    policy = PoolPolicy(
        preemption=draw(st.sampled_from(list(Preemption))),
        same_zone=draw(st.booleans()),
        slices=draw(st.sampled_from([(), (600.0,)])),
    )
    return snapshot(nodes, queued, held, now=10.0, pools=[policy])


@settings(max_examples=80, deadline=None)
@given(s=_pools(), steps=st.integers(1, 40))
def test_forecast_agrees_with_predict_job_by_job(s: Snapshot, steps: int) -> None:
    found = forecast(s, max_steps=steps)
    assert list(found) == [j.id for j in s.pending]
    for j in s.pending:
        assert found[j.id] == predict(s, j.id, max_steps=steps)


def _replayed(s: Snapshot, job_id: int, max_steps: int) -> tuple[object, ...]:
    """The prediction by the plain replay the module describes, written out step by step
    (what predict() did before it shared its replay with forecast()): (start_at, now, ahead,
    waits_for, never, unknown)."""
    ahead: list[int] = []
    ended = {r.id: r for r in s.running if r.suspending}
    state = replace(s, running=tuple(r for r in s.running if not r.suspending))
    for step in range(max_steps):
        decisions = decide(state)
        order = [start.job_id for start in decisions.starts]
        if job_id in order:
            start = decisions.starts[order.index(job_id)]
            nodes = {a.node for a in start.allocations}
            freed = sorted(
                j for j, r in ended.items() if any(a.node in nodes for a in r.allocations)
            )
            now = step == 0 and not any(r.suspending for r in s.running)
            return (
                state.now,
                now,
                (*ahead, *order[: order.index(job_id)]),
                tuple(freed),
                None,
                False,
            )
        wait = decisions.waits.get(job_id)
        if wait is not None and wait.code in (WaitCode.UNSATISFIABLE, WaitCode.POOL):
            return (None, False, (), (), wait.message, False)
        pending = {p.id: p for p in state.pending}
        running_jobs = {r.id: r for r in state.running}
        for start in decisions.starts:
            queued = pending.pop(start.job_id)
            ahead.append(queued.id)
            running_jobs[queued.id] = RunningJob(
                queued.id,
                queued.priority,
                queued.owner,
                start.allocations,
                group=queued.group,
                started_at=state.now,
                max_runtime=queued.max_runtime,
            )
        for p in decisions.preempts:
            victim = running_jobs.pop(p.job_id, None)
            if victim is not None:
                members = tuple(
                    Member(len(a.gpus), a.cpus, a.memory, whole_node=a.exclusive)
                    for a in victim.allocations
                )
                pending[victim.id] = PendingJob(
                    victim.id,
                    victim.version,
                    victim.priority,
                    victim.id,
                    victim.owner,
                    Request(members),
                    group=victim.group,
                    max_runtime=victim.max_runtime,
                )
        state = replace(
            state, pending=tuple(pending.values()), running=tuple(running_jobs.values())
        )
        if decisions.preempts:
            continue
        ends = [r.expected_end for r in state.running]
        later = [t for t in ends if t is not None and t > state.now]
        if not later:
            blockers = tuple(sorted(r.id for r in state.running if r.expected_end is None))
            return (None, False, tuple(ahead), blockers, None, True)
        now = min(later)
        ended.update(
            {r.id: r for r in state.running if r.expected_end is not None and r.expected_end <= now}
        )
        state = replace(
            state, now=now, running=tuple(r for r in state.running if r.id not in ended)
        )
    return (None, False, tuple(ahead), (), None, True)


@settings(max_examples=60, deadline=None)
@given(s=_pools(), steps=st.integers(1, 40))
def test_predict_is_the_plain_replay_of_decide(s: Snapshot, steps: int) -> None:
    for j in s.pending:
        p = predict(s, j.id, max_steps=steps)
        assert (p.start_at, p.now, tuple(p.ahead), p.waits_for, p.never, p.unknown) == (
            _replayed(s, j.id, steps)
        )
