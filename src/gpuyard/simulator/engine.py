"""The event-driven engine: one partition, a virtual clock, a policy asked at each change.

Time jumps from event to event; nothing is simulated between them because nothing changes
there. At each event time ``t``, in this order (the artifact's order within a tick):

1. jobs whose remaining work reaches 0 at ``t`` finish and free their GPUs;
2. jobs submitted at ``t`` enter the queue;
3. the policy decides, and the engine applies its preemptions, then its starts. The policy
   is asked only when something changed (a submission, a completion, a wake-up it asked for)
   and a job is pending or it asked for the wake-up: with an empty queue there is nothing
   to decide. ``View.submitted`` and ``View.finished`` hold everything since its last call.

A job runs its trace duration; each preemption adds the overhead (checkpoint + restart) to
its remaining work, and it finishes when the remaining work reaches 0. While a job waits, its
queue time accrues; ``jct = end - submit``. The engine also integrates, between events, the
GPUs allocated while at least one job waits (the "allocation rate while jobs wait").
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuyard.simulator.cluster import Partition
from gpuyard.simulator.policy import (
    Decision,
    JobStatus,
    Policy,
    SimJob,
    SimulationError,
    Slot,
    View,
)
from gpuyard.simulator.trace import TraceJob

__all__ = ["Engine", "Overhead", "PartitionResult", "Progress"]

Progress = Callable[[int], None]
"""Called with the number of jobs finished so far (every few hundred, and at the end)."""

_PROGRESS_EVERY = 250
_ROUNDS_PER_INSTANT = 8


@dataclass(frozen=True, slots=True)
class Overhead:
    """Seconds of work a preemption adds (checkpoint, requeue, restart), by job size.

    The default is the artifact's: 40 s up to 8 GPUs, 60 s above."""

    small: float = 40.0
    large: float = 60.0
    threshold: int = 8
    """Jobs with more GPUs than this pay ``large``."""

    def of(self, gpus: int) -> float:
        return self.small if gpus <= self.threshold else self.large


@dataclass(slots=True)
class PartitionResult:
    partition: str
    policy: str
    gpus: int
    jobs: list[SimJob]
    """Every job, in submit order."""
    waiting_seconds: float = 0.0
    """Time during which at least one job was pending."""
    allocated_while_waiting: float = 0.0
    """GPU-seconds allocated during that time."""
    allocated: float = 0.0
    """GPU-seconds allocated in all."""
    decisions: int = 0
    """Times the policy was asked."""
    wall_seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


class Engine:
    def __init__(
        self,
        partition: Partition,
        jobs: Sequence[TraceJob],
        policy: Policy,
        *,
        policy_name: str = "",
        overhead: Overhead | None = None,
        on_progress: Progress | None = None,
        max_idle_wakes: int = 10_000,
    ) -> None:
        """``jobs`` in submit order (ties: trace order); their position is their index.

        ``max_idle_wakes``: with nothing running and nothing left to arrive, only time
        passes; after this many wake-ups in a row that change nothing, the replay ends (a
        policy that waits forever for a job that never fits would otherwise never stop)."""
        self.partition = partition
        self.nodes = partition.nodes
        self.policy = policy
        self.policy_name = policy_name
        self.overhead = overhead or Overhead()
        self.on_progress = on_progress
        self.max_idle_wakes = max_idle_wakes
        self._idle_wakes = 0
        self.jobs = [
            SimJob(
                index=i,
                job_id=j.job_id,
                user=j.user,
                group=j.group,
                submit=j.submit,
                gpus=j.gpus,
                nodes=j.nodes,
                priority=j.priority,
            )
            for i, j in enumerate(jobs)
        ]
        if any(a.submit > b.submit for a, b in itertools.pairwise(jobs)):
            raise SimulationError("jobs must be given in submit order")
        self._remaining = [float(j.duration) for j in jobs]
        self._run = [0] * len(jobs)
        """Run number of each job: a finish event of an earlier run is stale."""
        self.free = [n.gpus for n in self.nodes]
        self.now = jobs[0].submit if jobs else 0.0
        self.pending: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self._held: dict[int, int] = {}
        self._allocated = 0
        self._finishes: list[tuple[float, int, int]] = []
        self._wakes: list[float] = []
        self._wake_set: set[float] = set()
        self._next_submit = 0
        self._submitted: list[SimJob] = []
        self._finished: list[SimJob] = []
        """Since the policy's previous call."""
        self._done = 0
        self.result = PartitionResult(partition.name, policy_name, partition.gpus, self.jobs)

    def run(self) -> PartitionResult:
        previous: float | None = None
        while (t := self._next_time()) is not None:
            if previous is not None:
                self._account(t - previous)
            previous = self.now = t
            self._finished += self._release(t)
            self._submitted += self._admit(t)
            woke = False
            while self._wakes and self._wakes[0] <= t:
                self._wake_set.discard(heapq.heappop(self._wakes))
                woke = True
            if self.pending or woke:
                self._decide(t)
        if self.on_progress is not None:
            self.on_progress(self._done)
        return self.result

    def _decide(self, t: float) -> None:
        """Ask the policy; after preemptions, ask again at once: the GPUs they freed are for
        jobs the policy could not start before (a few rounds at most per instant)."""
        for _ in range(_ROUNDS_PER_INSTANT):
            view = View(
                t,
                self.nodes,
                self.free,
                self.pending,
                self.running,
                self._submitted,
                self._finished,
            )
            decision = self.policy.decide(view)
            self._submitted, self._finished = [], []
            self.result.decisions += 1
            self._apply(decision)
            self._schedule_wake(decision)
            if not decision.preempts or not self.pending:
                return

    def _next_time(self) -> float | None:
        while self._finishes and self._finishes[0][2] != self._run[self._finishes[0][1]]:
            heapq.heappop(self._finishes)  # the run it ends was preempted
        times = [
            self._finishes[0][0] if self._finishes else None,
            self.jobs[self._next_submit].submit if self._next_submit < len(self.jobs) else None,
            self._wakes[0] if self._wakes else None,
        ]
        known = [t for t in times if t is not None]
        return min(known) if known else None

    def _account(self, dt: float) -> None:
        self.result.allocated += self._allocated * dt
        if self.pending:
            self.result.waiting_seconds += dt
            self.result.allocated_while_waiting += self._allocated * dt

    def _release(self, t: float) -> list[SimJob]:
        finished: list[SimJob] = []
        while self._finishes and self._finishes[0][0] <= t:
            _, index, run = heapq.heappop(self._finishes)
            if run != self._run[index]:
                continue
            job = self.running.pop(index)
            self._stop(job, t)
            self._remaining[index] = 0.0
            job.status = JobStatus.DONE
            job.end = t
            finished.append(job)
            self._done += 1
            if self.on_progress is not None and self._done % _PROGRESS_EVERY == 0:
                self.on_progress(self._done)
        return finished

    def _admit(self, t: float) -> list[SimJob]:
        submitted: list[SimJob] = []
        while self._next_submit < len(self.jobs) and self.jobs[self._next_submit].submit <= t:
            job = self.jobs[self._next_submit]
            job.status = JobStatus.PENDING
            job.pending_since = job.submit
            self.pending[job.index] = job
            submitted.append(job)
            self._next_submit += 1
        return submitted

    def _stop(self, job: SimJob, t: float) -> None:
        """End the current run: count it and give its GPUs back."""
        if job.started_at is None:  # pragma: no cover - running jobs always have a start
            raise SimulationError(f"job {job.job_id} runs without a start time")
        job.ran += t - job.started_at
        job.started_at = None
        for slot in job.placement:
            self.free[slot.node] += slot.gpus
        self._allocated -= self._held.pop(job.index)
        job.placement = ()

    def _apply(self, decision: Decision) -> None:
        for index in decision.preempts:
            self._preempt(index)
        for start in decision.starts:
            self._start(start.job, start.placement)

    def _preempt(self, index: int) -> None:
        job = self.running.pop(index, None)
        if job is None:
            raise SimulationError(f"the policy preempted job {index}, which is not running")
        if job.started_at is None:  # pragma: no cover - running jobs always have a start
            raise SimulationError(f"job {job.job_id} runs without a start time")
        self._remaining[index] -= self.now - job.started_at
        self._remaining[index] += self.overhead.of(job.gpus)
        self._run[index] += 1
        self._stop(job, self.now)
        job.status = JobStatus.PENDING
        job.pending_since = self.now
        job.preemptions += 1
        self.pending[index] = job

    def _start(self, index: int, placement: tuple[Slot, ...]) -> None:
        job = self.pending.get(index)
        if job is None:
            raise SimulationError(f"the policy started job {index}, which is not pending")
        need: dict[int, int] = {}
        for slot in placement:
            if not 0 <= slot.node < len(self.free) or slot.gpus < 0:
                raise SimulationError(f"job {job.job_id}: no such slot {slot}")
            need[slot.node] = need.get(slot.node, 0) + slot.gpus
        short = [n for n, gpus in need.items() if self.free[n] < gpus]
        if short:
            raise SimulationError(
                f"job {job.job_id}: node {self.nodes[short[0]].name} has only "
                f"{self.free[short[0]]} free GPUs, the placement wants {need[short[0]]}"
            )
        held = sum(need.values())
        if held < job.gpus:
            raise SimulationError(f"job {job.job_id} needs {job.gpus} GPUs, got {held}")
        for node, gpus in need.items():
            self.free[node] -= gpus
        del self.pending[index]
        self.running[index] = job
        self._held[index] = held
        self._allocated += held
        job.status = JobStatus.RUNNING
        job.placement = placement
        job.queued += self.now - job.pending_since
        job.started_at = self.now
        if job.first_start is None:
            job.first_start = self.now
        heapq.heappush(self._finishes, (self.now + self._remaining[index], index, self._run[index]))

    def _schedule_wake(self, decision: Decision) -> None:
        wake = decision.wake_at
        if wake is None:
            return
        if wake <= self.now:
            raise SimulationError(f"wake_at {wake} is not after now ({self.now})")
        idle = not self.running and self._next_submit == len(self.jobs)
        if idle and not decision.starts:
            self._idle_wakes += 1
            if self._idle_wakes > self.max_idle_wakes:
                return
        else:
            self._idle_wakes = 0
        if wake not in self._wake_set:
            self._wake_set.add(wake)
            heapq.heappush(self._wakes, wake)
