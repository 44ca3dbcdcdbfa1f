"""Replay a trace: every (policy, cluster) pair is an independent engine run, in worker
processes when there are several CPUs, with progress reported as jobs finish."""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from gpuyard.errors import InvalidSpec
from gpuyard.simulator.cluster import Partition
from gpuyard.simulator.engine import Engine, Overhead, PartitionResult
from gpuyard.simulator.policy import Policy, PolicyContext
from gpuyard.simulator.trace import TraceJob

__all__ = ["POLICIES", "PolicyInfo", "default_workers", "make_policy", "replay"]


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    name: str
    description: str
    oracle: bool = False
    """Gets the trace's run times (reference SJF only)."""
    consolidate: bool = False
    """Places with the artifact's consolidate rules, whose gangs need nodes of one size."""


POLICIES: dict[str, PolicyInfo] = {
    p.name: p
    for p in (
        PolicyInfo(
            "fifo",
            "reference FIFO: the artifact's rules, a check of the simulator",
            consolidate=True,
        ),
        PolicyInfo(
            "sjf",
            "reference SJF (oracle run times): the artifact's rules",
            oracle=True,
            consolidate=True,
        ),
        PolicyInfo(
            "srtf",
            "shortest remaining time first (oracle run times), preemptive: the artifact's rules",
            oracle=True,
            consolidate=True,
        ),
        PolicyInfo(
            "tiresias",
            "Tiresias: two-queue least-attained-service (5 GPU-hours), every 60 s: the "
            "artifact's rules",
            consolidate=True,
        ),
        PolicyInfo(
            "gpuyard",
            "gpuyard.scheduler.decide() on a time-sharing pool (preemption: suspend, slices at "
            "1, 10, 100 GPU-hours, aging 3 h, quantum 1 h), as the server runs it, with run "
            "times predicted from the jobs that ended",
        ),
        PolicyInfo(
            "gpuyard-blind",
            "gpuyard's time-sharing pool without predicted run times (what it did before it "
            "learnt from history)",
        ),
        PolicyInfo(
            "gpuyard-never",
            "gpuyard.scheduler.decide() on a pool without preemption (the default pool)",
        ),
    )
}


def make_policy(name: str, context: PolicyContext) -> Policy:
    if name in ("fifo", "sjf"):
        from gpuyard.simulator.reference import ReferencePolicy

        return ReferencePolicy(context, name)
    if name == "srtf":
        from gpuyard.simulator.baselines import SrtfPolicy

        return SrtfPolicy(context)
    if name == "tiresias":
        from gpuyard.simulator.baselines import TiresiasPolicy

        return TiresiasPolicy(context)
    if name in ("gpuyard", "gpuyard-never", "gpuyard-blind"):
        from gpuyard.scheduler import (
            TIME_SHARING_AGE_HALFLIFE,
            TIME_SHARING_MIN_RUN,
            TIME_SHARING_SLICES,
            PoolPolicy,
            Preemption,
        )
        from gpuyard.simulator.gpuyard_policy import GpuyardPolicy

        if name == "gpuyard-never":
            return GpuyardPolicy(context)
        sharing = PoolPolicy(
            preemption=Preemption.SUSPEND,
            slices=TIME_SHARING_SLICES,
            age_halflife=TIME_SHARING_AGE_HALFLIFE,
            min_run=TIME_SHARING_MIN_RUN,
        )
        return GpuyardPolicy(
            context, pools={sharing.name: sharing}, predict=name != "gpuyard-blind"
        )
    raise InvalidSpec(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def run_one(
    policy: str,
    partition: Partition,
    jobs: Sequence[TraceJob],
    overhead: Overhead,
    on_progress: Callable[[int], None] | None = None,
    forecast_every: int = 0,
) -> PartitionResult:
    """One policy on one cluster. ``jobs``: that cluster's, in submit order.
    ``forecast_every``: see :attr:`PolicyContext.forecast_every`."""
    info = POLICIES.get(policy)
    if info is None:
        raise InvalidSpec(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    durations = [j.duration for j in jobs] if info.oracle else None
    engine = Engine(
        partition,
        jobs,
        make_policy(policy, PolicyContext(partition, durations, overhead.of, forecast_every)),
        policy_name=policy,
        overhead=overhead,
        on_progress=on_progress,
    )
    started = time.perf_counter()
    result = engine.run()
    result.wall_seconds = time.perf_counter() - started
    return result


Progress = Callable[[int], None]
"""Called with the number of jobs newly finished, summed over all runs."""


def replay(
    partitions: Sequence[Partition],
    jobs: Sequence[TraceJob],
    policies: Sequence[str],
    *,
    overhead: Overhead | None = None,
    workers: int = 1,
    progress: Progress | None = None,
    forecast_every: int = 0,
) -> list[PartitionResult]:
    """Every policy on every cluster; results in (policy, cluster file) order.
    ``forecast_every``: see :attr:`PolicyContext.forecast_every`."""
    overhead = overhead or Overhead()
    for name in policies:
        if name not in POLICIES:
            raise InvalidSpec(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    per_cluster: dict[str, list[TraceJob]] = {p.name: [] for p in partitions}
    for job in jobs:
        per_cluster[job.cluster].append(job)
    tasks = [(policy, p, per_cluster[p.name]) for policy in policies for p in partitions]
    tasks = [t for t in tasks if t[2]]
    for policy, p, js in tasks:
        _check_placeable(policy, p, js)
    if workers <= 1 or len(tasks) <= 1:
        return [
            _in_process(policy, p, js, overhead, progress, forecast_every)
            for policy, p, js in tasks
        ]
    return _in_workers(tasks, overhead, min(workers, len(tasks)), progress, forecast_every)


def _check_placeable(policy: str, partition: Partition, jobs: Sequence[TraceJob]) -> None:
    """Before anything is replayed: the consolidate placement cannot place a gang on nodes of
    several sizes, and would stop the replay at the first such job."""
    if not POLICIES[policy].consolidate:
        return
    sizes = {c.gpus for c in partition.classes}
    if len(sizes) < 2:
        return
    largest = max(sizes)
    gang = next((j for j in jobs if j.gpus > largest), None)
    if gang is not None:
        where = f"line {gang.line}, " if gang.line else ""
        raise InvalidSpec(
            f"--policy {policy} places a job larger than a node (the {gang.gpus}-GPU job "
            f"{gang.job_id!r}, {where}on cluster {partition.name!r}) only on nodes of one "
            f"size, and {partition.name!r} has nodes of {', '.join(map(str, sorted(sizes)))} "
            "GPUs; choose gpuyard or gpuyard-never for this cluster"
        )


def _in_process(
    policy: str,
    partition: Partition,
    jobs: Sequence[TraceJob],
    overhead: Overhead,
    progress: Progress | None,
    forecast_every: int = 0,
) -> PartitionResult:
    seen = 0

    def report(done: int) -> None:
        nonlocal seen
        if progress is not None:
            progress(done - seen)
        seen = done

    return run_one(policy, partition, jobs, overhead, report, forecast_every)


_updates: Any = None
"""In a worker: the queue its progress goes to."""


def _init_worker(updates: Any) -> None:
    global _updates  # noqa: PLW0603 - the one way a pool initializer hands state to tasks
    _updates = updates


_SEND_EVERY = 0.1
"""Seconds between a worker's progress messages: the engine reports at every completion,
and a message per completion would cost more than the display gains."""


def _run_task(
    key: int,
    policy: str,
    partition: Partition,
    jobs: Sequence[TraceJob],
    overhead: Overhead,
    forecast_every: int = 0,
) -> tuple[int, PartitionResult]:
    sent = latest = 0
    last = time.monotonic()

    def report(done: int) -> None:
        nonlocal sent, latest, last
        latest = done
        now = time.monotonic()
        if now - last >= _SEND_EVERY and latest > sent:
            _updates.put(latest - sent)
            sent, last = latest, now

    result = run_one(policy, partition, jobs, overhead, report, forecast_every)
    if latest > sent:
        _updates.put(latest - sent)
    return key, result


def _in_workers(
    tasks: list[tuple[str, Partition, list[TraceJob]]],
    overhead: Overhead,
    workers: int,
    progress: Progress | None,
    forecast_every: int = 0,
) -> list[PartitionResult]:
    context = multiprocessing.get_context("spawn")
    updates = context.Queue()
    results: dict[int, PartitionResult] = {}
    # Largest first, so that the long runs do not start last.
    order = sorted(range(len(tasks)), key=lambda k: -len(tasks[k][2]))
    with ProcessPoolExecutor(workers, context, _init_worker, (updates,)) as pool:
        pending: set[Future[tuple[int, PartitionResult]]] = {
            pool.submit(
                _run_task, k, tasks[k][0], tasks[k][1], tasks[k][2], overhead, forecast_every
            )
            for k in order
        }
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(updates, progress)
            for future in done:
                key, result = future.result()
                results[key] = result
    _drain(updates, progress)  # the workers have exited: what they reported has arrived
    return [results[k] for k in range(len(tasks))]


def _drain(updates: Any, progress: Progress | None) -> None:
    while True:
        try:
            delta = updates.get_nowait()
        except queue.Empty:
            return
        if progress is not None:
            progress(int(delta))
