"""Baselines from the literature, run in the same study as gpuyard's policy.

The published results of the Helios/Lucid artifact exist only for the Venus trace as given; a
variant of it (arrivals faster or slower, one virtual cluster alone, another trace) has none.
To compare on any workload, these policies follow the artifact's preemptive rules (see the
Venus trace README) and run on the same engine:

- ``srtf``: shortest remaining time first, an **oracle** (it reads the trace's run times).
  Remaining time = run time + the overhead of each preemption so far − time run.
- ``tiresias``: two-queue discretised least-attained-service (Tiresias), GPU-seconds of
  service against a threshold of 18,000 (5 GPU-hours), first come first served inside a
  queue, rescheduling only every 60 s (on the clock's whole minutes).

Both choose like the artifact: the queued and the running jobs in one order; down that order,
a job is kept while the cluster's GPUs (counted, not placed) last; running jobs not kept are
preempted; kept queued jobs are then placed in order with the artifact's "consolidate"
placement, and one that does not fit (fragmentation) stays queued. There is no starvation
guard in either, as in the artifact.

What differs from the artifact (a 1-second clock) is what an event-driven engine changes: a
job ends when its work reaches 0, not 1 s later. ``tests/integration/simulator`` compares the
averages of every Venus VC with the published ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from gpuyard.simulator.policy import (
    Decision,
    JobStatus,
    PolicyContext,
    SimJob,
    SimulationError,
    StartJob,
    View,
)
from gpuyard.simulator.reference import consolidate

__all__ = ["TIRESIAS_INTERVAL", "TIRESIAS_THRESHOLD", "SrtfPolicy", "TiresiasPolicy"]

TIRESIAS_THRESHOLD = 18_000.0
"""GPU-seconds of service that move a job to Tiresias' second queue (the artifact's value)."""
TIRESIAS_INTERVAL = 60.0
"""Seconds between Tiresias' scheduling rounds (the artifact's, after Pollux)."""


class _Greedy:
    """The artifact's choice over an ordered list of queued and running jobs."""

    def __init__(self, context: PolicyContext) -> None:
        self._capacity = [n.gpus for n in context.partition.nodes]
        self._total = sum(self._capacity)

    def choose(self, view: View, order: Sequence[SimJob]) -> Decision:
        quota = self._total
        queued: list[SimJob] = []
        preempts: list[SimJob] = []
        for job in order:
            if job.gpus <= quota:
                quota -= job.gpus
                if job.status is JobStatus.PENDING:
                    queued.append(job)
            elif job.status is JobStatus.RUNNING:
                preempts.append(job)
        free = list(view.free)
        for victim in preempts:
            for slot in victim.placement:
                free[slot.node] += slot.gpus
        starts: list[StartJob] = []
        for job in queued:
            placement = consolidate(free, self._capacity, job.gpus)
            if placement is None:
                continue  # does not fit (fragmentation): it stays queued
            for slot in placement:
                free[slot.node] -= slot.gpus
            starts.append(StartJob(job.index, placement))
        return Decision(starts=starts, preempts=[v.index for v in preempts])


class SrtfPolicy(_Greedy):
    """Shortest remaining time first (an oracle: it needs the trace's run times)."""

    def __init__(self, context: PolicyContext) -> None:
        if context.durations is None:
            raise SimulationError("SRTF needs the trace's run times (an oracle policy)")
        super().__init__(context)
        self._durations = context.durations
        self._overhead: Callable[[int], float] = context.overhead_of or (lambda _gpus: 0.0)

    def remaining(self, job: SimJob, now: float) -> float:
        return (
            self._durations[job.index]
            + job.preemptions * self._overhead(job.gpus)
            - job.attained(now)
        )

    def decide(self, view: View) -> Decision:
        # Queued jobs before running ones on ties, each in the order they entered: the
        # artifact's stable sort of (queue + running list).
        jobs = [*view.pending.values(), *view.running.values()]
        jobs.sort(key=lambda j: self.remaining(j, view.now))
        # Between submissions and completions nothing changes the order that matters: a
        # running job's remaining time only falls, a queued one's stays.
        return self.choose(view, jobs)


class TiresiasPolicy(_Greedy):
    """Two-queue discretised LAS; no run times."""

    def __init__(
        self,
        context: PolicyContext,
        *,
        threshold: float = TIRESIAS_THRESHOLD,
        interval: float = TIRESIAS_INTERVAL,
    ) -> None:
        super().__init__(context)
        self.threshold = threshold
        self.interval = interval

    def _next_round(self, now: float) -> float:
        return (math.floor(now / self.interval) + 1) * self.interval

    def decide(self, view: View) -> Decision:
        now = view.now
        if now % self.interval:
            return Decision(wake_at=self._next_round(now))
        threshold = self.threshold
        # The artifact's list is running jobs, then queued ones; a stable sort on
        # (queue, submit time) keeps that order between equals.
        jobs = [*view.running.values(), *view.pending.values()]
        jobs.sort(key=lambda j: (j.attained_gpu_seconds(now) > threshold, j.submit))
        decision = self.choose(view, jobs)
        started = {s.job for s in decision.starts}
        if len(view.pending) > len(started):
            # Someone still waits: the order changes next when a running job of the first
            # queue passes the threshold (then it may lose its place), or at a submission
            # or completion (the engine calls then, and this waits for the next round).
            preempted = set(decision.preempts)
            crossing = [
                now + (threshold - j.attained_gpu_seconds(now)) / j.gpus
                for j in (*view.running.values(), *(view.pending[i] for i in started))
                if j.index not in preempted
                and j.gpus > 0
                and j.attained_gpu_seconds(now) <= threshold
            ]
            if crossing:
                decision.wake_at = max(self._next_round(min(crossing)), self._next_round(now))
        return decision
