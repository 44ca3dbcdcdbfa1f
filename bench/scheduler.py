"""How long one full scheduling cycle takes on a large pool, beside a naive baseline.

A synthetic pool of 10,000 nodes x 8 GPUs, half busy with running jobs, and 100,000 queued jobs
of mixed shapes (1-8 GPUs on one node, gangs of 2-16 whole nodes, CPU-only), tiers, owners,
groups and max runtimes, with quotas on some owners. It times ``decide()`` over the whole queue
and prints placements per second. The baseline is the textbook loop: one scan over every node
per job for its best fit, no indexes and no caches; it is measured on a slice of the queue in the
same run and scaled to the whole queue.

    python bench/scheduler.py [--nodes 10000] [--jobs 100000] [--baseline-jobs 2000]

Goal: a full cycle under 1 s on the 2-core CI machine.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter

from gpuyard.models import Priority
from gpuyard.scheduler import (
    Allocation,
    Limit,
    NodeCapacity,
    PendingJob,
    Request,
    RunningJob,
    Snapshot,
    decide,
)

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--baseline-jobs", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    began = time.perf_counter()
    snapshot = build(args.nodes, args.jobs)
    print(
        f"pool: {args.nodes:,} nodes x 8 GPUs, {len(snapshot.running):,} running jobs, "
        f"{args.jobs:,} queued (built in {time.perf_counter() - began:.1f} s)"
    )
    times = []
    decisions = decide(snapshot)
    for _ in range(args.repeat):
        began = time.perf_counter()
        decisions = decide(snapshot)
        times.append(time.perf_counter() - began)
    cycle = statistics.median(times)
    codes = Counter(w.code.value for w in decisions.waits.values())
    print(
        f"gpuyard decide(): {cycle:.3f} s per full cycle (median of {args.repeat}); "
        f"{len(decisions.starts):,} starts, {len(decisions.waits):,} waits {dict(codes)}"
    )
    print(
        f"  {args.jobs / cycle:,.0f} jobs considered/s, "
        f"{len(decisions.starts) / cycle:,.0f} placements/s"
    )

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


if __name__ == "__main__":
    main()
