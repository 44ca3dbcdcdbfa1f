"""How long one full scheduling cycle takes on a large pool, beside a naive baseline; and how
much of the queue a forecast covers within a budget.

A synthetic pool of 10,000 nodes x 8 GPUs, half busy with running jobs, and 100,000 queued jobs
of mixed shapes (1-8 GPUs on one node, gangs of 2-16 whole nodes, CPU-only), tiers, owners,
groups and max runtimes, with quotas on some owners. It times ``decide()`` over the whole queue
with the garbage collector on, as the server runs it: inside ``frozen_heap()`` (the snapshot
out of the collector's walks, as the controller runs a pass), and without it; and says how much
of each cycle the collector took. Each timed cycle starts after a full collection, so that
every one finds the collector in the same state. The baseline is the textbook loop: one scan
over every node per job for its best fit, no indexes and no caches; it is measured on a slice
of the queue in the same run and scaled to the whole queue.

Then the same cycle with predicted run times on every job (docs/scheduling.md#predicted-run-
times): a duration predictor learnt from 20,000 ended jobs of the same owners predicts every
queued job (its cost per job is printed; the goal is under 1 ms) and every running one without
a max runtime, and ``decide()`` orders the queue by them and times reservations with them.

Then ``forecast()`` of the whole queue within a time budget, and of a 5,000-job queue on 1,000
nodes (the same mix): how many jobs got a start time, how many steps the replay made.

    python bench/scheduler.py [--nodes 10000] [--jobs 100000] [--baseline-jobs 2000]
                              [--repeat 5] [--budget 10]

Goal: a full cycle under 1 s on the 2-core CI machine, even with the other core busy.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace

from gpuyard.models import Priority
from gpuyard.scheduler import (
    Allocation,
    Budget,
    Forecast,
    Limit,
    NodeCapacity,
    PendingJob,
    Request,
    RunningJob,
    Snapshot,
    decide,
    forecast,
    frozen_heap,
    predict,
)
from gpuyard.scheduler.durations import DurationPredictor, JobFeatures

GiB = 1 << 30
SHAPES = [  # (nodes, GPUs per node, CPUs per node, weight)
    (1, 1, 8, 30),
    (1, 2, 16, 15),
    (1, 4, 32, 12),
    (1, 8, 64, 10),
    (1, 0, 4, 8),
    (2, 8, 64, 8),
    (4, 8, 64, 7),
    (8, 8, 64, 6),
    (16, 8, 64, 4),
]
TIERS = [Priority.LOW, Priority.NORMAL, Priority.NORMAL, Priority.NORMAL, Priority.HIGH]


def build(nodes: int, jobs: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    capacity = tuple(
        NodeCapacity(f"node{i:05d}", 8, 96, 1024 * GiB, labels={"zone": f"z{i // 500}"})
        for i in range(nodes)
    )
    running = []
    # Half the nodes busy: whole-node gangs on some, partial jobs on others.
    for i in range(0, nodes // 2, 4):
        running.append(
            RunningJob(
                id=10_000_000 + i,
                priority=Priority.NORMAL.rank,
                owner=f"user{i % 200}",
                allocations=tuple(
                    Allocation(f"node{i + k:05d}", tuple(range(8)), 64, 0, exclusive=True)
                    for k in range(2)
                ),
                started_at=0.0,
                max_runtime=rng.choice([None, 3600.0, 86400.0]),
            )
        )
        for k in (2, 3):
            running.append(
                RunningJob(
                    id=10_000_000 + i + k,
                    priority=Priority.LOW.rank,
                    owner=f"user{(i + k) % 200}",
                    allocations=(
                        Allocation(f"node{i + k:05d}", tuple(range(rng.choice([3, 5, 7]))), 8, 0),
                    ),
                    started_at=0.0,
                    max_runtime=rng.choice([None, 1800.0]),
                )
            )
    weights = [w for *_, w in SHAPES]
    pending = []
    for j in range(jobs):
        n, g, c, _ = rng.choices(SHAPES, weights)[0]
        owner = rng.randrange(500)
        pending.append(
            PendingJob(
                id=j + 1,
                version=0,
                priority=rng.choice(TIERS).rank,
                seq=j + 1,
                owner=f"user{owner}",
                group=f"group{owner % 40}",
                request=Request.uniform(nodes=n, gpus=g, cpus=c, memory=4 * GiB * max(g, 1)),
                max_runtime=rng.choice([None, 600.0, 3600.0, 36000.0]),
            )
        )
    quotas = {
        ("user", f"user{u}", Priority.NORMAL.rank): Limit(nodes=4, gpus=32)
        for u in range(0, 500, 5)
    }
    return Snapshot(
        now=100.0, nodes=capacity, pending=tuple(pending), running=tuple(running), quotas=quotas
    )


def naive(snapshot: Snapshot, limit: int) -> int:
    """One scan over every node per job: best fit by free GPUs, whole nodes for gangs."""
    free = {n.name: [n.gpus, n.cpus, 0] for n in snapshot.nodes}  # gpus, cpus, holders
    for job in snapshot.running:
        for a in job.allocations:
            f = free[a.node]
            f[0] -= len(a.gpus) if not a.exclusive else f[0]
            f[1] -= a.cpus if not a.exclusive else f[1]
            f[2] += 1
    placed = 0
    ordered = sorted(snapshot.pending, key=lambda j: (-j.priority, j.seq))[:limit]
    for job in ordered:
        member = job.request.members[0]
        if member.whole_node:
            chosen = []
            for name, f in free.items():  # one scan
                if f[2] == 0 and len(chosen) < job.request.nodes:
                    chosen.append(name)
            if len(chosen) == job.request.nodes:
                for name in chosen:
                    free[name] = [0, 0, 1]
                placed += 1
            continue
        best, best_left = None, None
        for name, f in free.items():  # one scan
            if f[0] >= member.gpus and f[1] >= member.cpus:
                left = f[0] - member.gpus
                if best_left is None or left < best_left:
                    best, best_left = name, left
        if best is not None:
            f = free[best]
            f[0] -= member.gpus
            f[1] -= member.cpus
            f[2] += 1
            placed += 1
    return placed


class _CollectorTime:
    """Seconds the garbage collector spends, and its collections per generation, measured
    with ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.collections[info["generation"]] += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.seconds, self.collections = 0.0, [0, 0, 0]
        gc.callbacks.append(self._callback)
        try:
            yield
        finally:
            gc.callbacks.remove(self._callback)


def time_cycles(
    snapshot: Snapshot, repeat: int, around: Callable[[], AbstractContextManager[object]]
) -> tuple[float, float, float, list[int], str]:
    """Median and least seconds per cycle, the collector's median seconds and its
    collections in the last cycle, and what the cycle decided. Each cycle starts after a full
    collection, with the previous cycle's decisions dropped, so that every one finds the same
    heap."""
    collector = _CollectorTime()
    cycles, spent = [], []
    summary = ""
    for _ in range(repeat):
        gc.collect()
        with around(), collector.counting():
            began = time.perf_counter()
            decisions = decide(snapshot)
            cycles.append(time.perf_counter() - began)
        spent.append(collector.seconds)
        codes = Counter(w.code.value for w in decisions.waits.values())
        summary = f"{len(decisions.starts):,} starts, {len(decisions.waits):,} waits {dict(codes)}"
        del decisions
    return (
        statistics.median(cycles),
        min(cycles),
        statistics.median(spent),
        collector.collections,
        summary,
    )


def cover(forecasts: dict[int, Forecast]) -> str:
    kinds = Counter(
        "a start time"
        if f.start_at is not None
        else "never"
        if f.never is not None
        else "waits for jobs without a max runtime"
        if f.waits_for
        else "not reached"
        for f in forecasts.values()
    )
    return ", ".join(f"{n:,} {kind}" for kind, n in kinds.most_common())


def bench_forecast(label: str, snapshot: Snapshot, seconds: float) -> None:
    with frozen_heap():
        began = time.perf_counter()
        found = forecast(snapshot, budget=Budget(seconds=seconds, clock=time.monotonic))
        spent = time.perf_counter() - began
    steps = next((f.stopped for f in found.values() if f.stopped), "the whole queue")
    print(f"forecast() of {label}: {spent:.1f} s (budget {seconds:g} s): {cover(found)}")
    print(f"  stopped: {steps}")


def with_predictions(snapshot: Snapshot, seed: int = 3) -> tuple[Snapshot, float]:
    """``snapshot`` with every job's predicted run time, from a predictor learnt from 20,000
    ended jobs of the same owners; and the seconds predicting took per job."""
    rng = random.Random(seed)
    predictor = DurationPredictor()
    for _ in range(20_000):
        owner = rng.randrange(500)
        features = JobFeatures(
            f"user{owner}",
            f"group{owner % 40}",
            name=f"exp{owner % 7}-{rng.randrange(99)}",
            gpus=rng.choice((1, 2, 4, 8, 16)),
        )
        seconds = math.exp(rng.gauss(7 + owner % 5, 1.0))
        predictor.observe(features, seconds, told=predictor.predict(features))
    began = time.perf_counter()
    pending = []
    for job in snapshot.pending:
        features = JobFeatures(
            job.owner,
            job.group,
            name=f"exp{job.id % 7}-{job.id % 99}",
            gpus=job.request.gpus,
            nodes=job.request.nodes,
        )
        found = predictor.predict(features)
        pending.append(replace(job, predicted=None if found is None else found.seconds))
    per_job = (time.perf_counter() - began) / max(len(pending), 1)
    running = []
    for job in snapshot.running:
        found = predictor.predict(
            JobFeatures(job.owner, gpus=job.gpus, nodes=job.nodes), elapsed=snapshot.now
        )
        end = None if found is None else job.started_at + found.seconds
        running.append(replace(job, predicted_end=end))
    return replace(snapshot, pending=tuple(pending), running=tuple(running)), per_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--baseline-jobs", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--budget", type=float, default=10.0, help="seconds per forecast")
    args = parser.parse_args()

    began = time.perf_counter()
    snapshot = build(args.nodes, args.jobs)
    print(
        f"pool: {args.nodes:,} nodes x 8 GPUs, {len(snapshot.running):,} running jobs, "
        f"{args.jobs:,} queued (built in {time.perf_counter() - began:.1f} s)"
    )
    decide(snapshot)
    plain, _, plain_collector, plain_collections, _ = time_cycles(
        snapshot, args.repeat, nullcontext
    )
    cycle, least, collector, collections, summary = time_cycles(snapshot, args.repeat, frozen_heap)
    print(
        f"gpuyard decide(): {cycle:.3f} s per full cycle (median of {args.repeat}, least "
        f"{least:.3f} s; garbage collector on, snapshot frozen); {summary}"
    )
    print(
        f"  the collector: {collector:.3f} s of it ({collector / cycle:.0%}), collections per "
        f"generation {collections}"
    )
    print(
        f"  without frozen_heap(): {plain:.3f} s per cycle, the collector {plain_collector:.3f} s "
        f"({plain_collector / plain:.0%}), collections per generation {plain_collections}"
    )
    print(f"  {args.jobs / cycle:,.0f} jobs considered/s")

    predicted, per_job = with_predictions(snapshot)
    timed, least, collector, _, summary = time_cycles(predicted, args.repeat, frozen_heap)
    print(
        f"with predicted run times: {timed:.3f} s per full cycle (median of {args.repeat}, least "
        f"{least:.3f} s; the collector {collector:.3f} s); {summary}; predicting took "
        f"{per_job * 1e6:.1f} us per job (goal: under 1 ms) -> "
        f"{'met' if timed < 1 and per_job < 1e-3 else 'NOT met'}"
    )
    del predicted

    began = time.perf_counter()
    placed = naive(snapshot, args.baseline_jobs)
    spent = time.perf_counter() - began
    per_job = spent / args.baseline_jobs
    print(
        f"naive baseline (one scan per job): {spent:.2f} s for the first {args.baseline_jobs:,} "
        f"jobs ({placed} placed) -> about {per_job * args.jobs:.0f} s for the whole queue"
    )
    print(
        f"ratio: decide() is {per_job * args.jobs / cycle:,.0f}x faster per cycle than the "
        f"baseline; goal: a cycle under 1 s -> {'met' if cycle < 1 else 'NOT met'}"
    )

    bench_forecast(f"the {args.jobs:,}-job queue", snapshot, args.budget)
    del snapshot
    small = build(1_000, 5_000, seed=2)
    bench_forecast("a 5,000-job queue on 1,000 nodes", small, args.budget)
    job = sorted(small.pending, key=lambda j: (-j.priority, j.seq))[len(small.pending) // 10]
    began = time.perf_counter()
    one = predict(small, job.id)
    print(
        f"predict() of one job of it (job {job.id}, a tenth of the way down the queue): "
        f"{time.perf_counter() - began:.2f} s, "
        + (
            f"starts at +{one.start_at - small.now:.0f} s"
            if one.start_at is not None
            else "no time"
        )
    )


if __name__ == "__main__":
    main()
