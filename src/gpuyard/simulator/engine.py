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
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuyard.errors import InvalidSpec
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
"""Called with the number of jobs replayed so far: at each event time where jobs finished
(so that a display moves as the replay does, not in jumps of hundreds), and at the end with
all of them (those left unfinished are replayed too: nothing more will happen to them)."""

_ROUNDS_PER_INSTANT = 8


_OVERHEAD_FORMS = (
    "write SECONDS (e.g. 40), SMALL,LARGE (up to 8 GPUs, above; e.g. 40,60) or a table "
    "GPUS:SECONDS,... (jobs of up to GPUS GPUs pay SECONDS; larger ones the last entry's; "
    "e.g. 1:30,8:40,64:90)"
)


@dataclass(frozen=True, slots=True)
class Overhead:
    """Seconds of work a preemption adds (checkpoint, requeue, restart), by job size.

    ``tiers``: (up to this many GPUs, seconds), by increasing GPUs; jobs larger than the last
    bound pay ``beyond``. The default is the artifact's: 40 s up to 8 GPUs, 60 s above. A
    table rather than two tiers because checkpoint and restart time grow with a job's size
    well past one node."""

    tiers: tuple[tuple[int, float], ...] = ((8, 40.0),)
    beyond: float = 60.0

    def __post_init__(self) -> None:
        bounds = [g for g, _ in self.tiers]
        seconds = [t for _, t in self.tiers] + [self.beyond]
        if any(b < 1 for b in bounds) or any(a >= b for a, b in itertools.pairwise(bounds)):
            raise InvalidSpec(f"overhead tiers {self.tiers}: GPU bounds must be 1 or more, rising")
        if any(not math.isfinite(t) or t < 0 for t in seconds):
            raise InvalidSpec(f"overhead seconds {seconds}: must be finite, 0 or more")

    @classmethod
    def flat(cls, seconds: float) -> Overhead:
        return cls((), seconds)

    @classmethod
    def small_large(cls, small: float, large: float, threshold: int = 8) -> Overhead:
        """``small`` up to ``threshold`` GPUs, ``large`` above (the artifact's form)."""
        return cls(((threshold, small),), large)

    @classmethod
    def parse(cls, text: str) -> Overhead:
        """``--overhead``: ``SECONDS``, ``SMALL,LARGE`` or ``GPUS:SECONDS,...``."""
        parts = [p.strip() for p in text.split(",")]
        if any(":" in p for p in parts):
            tiers: list[tuple[int, float]] = []
            for part in parts:
                bound, sep, seconds = part.partition(":")
                gpus, value = _int(bound), _seconds(seconds)
                if not sep or gpus is None or gpus < 1 or value is None:
                    raise InvalidSpec(
                        f"--overhead {text!r}: {part!r} is not GPUS:SECONDS with GPUS a whole "
                        f"number of 1 or more and SECONDS 0 or more; {_OVERHEAD_FORMS}"
                    )
                if tiers and gpus <= tiers[-1][0]:
                    raise InvalidSpec(
                        f"--overhead {text!r}: GPU bounds must rise ({gpus} comes after "
                        f"{tiers[-1][0]}); {_OVERHEAD_FORMS}"
                    )
                tiers.append((gpus, value))
            return cls(tuple(tiers), tiers[-1][1])
        values = [_seconds(p) for p in parts]
        if len(values) not in (1, 2) or any(v is None for v in values):
            raise InvalidSpec(
                f"--overhead {text!r}: not a number of seconds (0 or more) or a pair; "
                f"{_OVERHEAD_FORMS}"
            )
        numbers = [v for v in values if v is not None]
        if len(numbers) == 1:
            return cls.flat(numbers[0])
        return cls.small_large(numbers[0], numbers[1])

    def of(self, gpus: int) -> float:
        for bound, seconds in self.tiers:
            if gpus <= bound:
                return seconds
        return self.beyond

    def describe(self) -> str:
        """``40 s up to 8 GPUs, 60 s above``: for reports."""
        if not self.tiers or all(t == self.beyond for _, t in self.tiers):
            return f"{self.beyond:g} s"
        parts = [f"{t:g} s up to {g} GPU{'' if g == 1 else 's'}" for g, t in self.tiers]
        if self.beyond != self.tiers[-1][1]:
            parts.append(f"{self.beyond:g} s above")
        return ", ".join(parts)


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _seconds(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


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
    predicted: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    """What each job was predicted to run when it was submitted, as (seconds, low, high), by
    index: for a policy that predicts run times (``told_at_submission``)."""
    forecasts: dict[int, tuple[float | None, float | None, float | None]] = field(
        default_factory=dict
    )
    """The start each sampled job was predicted when it was submitted, as (start, earliest,
    latest), by index (``start_forecasts``; see ``PolicyContext.forecast_every``): None where
    no time could be given."""


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
            released = self._release(t)
            if released and self.on_progress is not None:
                self.on_progress(self._done)
            self._finished += released
            self._submitted += self._admit(t)
            woke = False
            while self._wakes and self._wakes[0] <= t:
                self._wake_set.discard(heapq.heappop(self._wakes))
                woke = True
            if self.pending or woke:
                self._decide(t)
        if self.on_progress is not None:
            self.on_progress(len(self.jobs))
        # What a predicting policy told the jobs (see PartitionResult.predicted, .forecasts).
        self.result.predicted = dict(getattr(self.policy, "told_at_submission", {}))
        self.result.forecasts = dict(getattr(self.policy, "start_forecasts", {}))
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
