"""Queue prediction: when would a job start? The same ``decide()``, run forward in time.

Every running job is taken to end at its max runtime (the user's own limit: the latest it can
end), else at its predicted end (docs/scheduling.md#predicted-run-times). From the snapshot,
repeat: decide; the jobs it starts run from now until their max runtime or predicted run
time; jump to the next expected end; free that job's room. A job's first start in this
replay is its prediction. A job waiting for room that only a job with neither holds gets no
time: the answer names the jobs it waits for instead.

The replay does not depend on which job is asked about, so one replay answers for the whole
queue: :func:`forecast` records every job's first start as the replay goes, within a bound on
its work (steps, job-considerations, or seconds on a clock the caller gives); the jobs it did
not reach are ``unknown``, with the reason. :func:`predict` is the same replay, stopped as
soon as one job is answered (the API's answer for a job that is not stored, a dry run).

docs/scheduling.md's queue prediction is exactly this: "starts now", or "starts at about T, behind
these jobs". A job with prepared data (docs/datasets.md) starts its workers once its nodes hold
it: its start is its placement plus the copy of what the nodes it is placed on lack, at the
snapshot's copy rate (:func:`gpuyard.scheduler.locality.copy_seconds`). The replay still
holds its nodes from its placement on, as the pool does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import overload

from gpuyard.models.disclosure import name_jobs
from gpuyard.quantities import format_duration
from gpuyard.scheduler.decide import Decisions, Start, WaitCode, decide_on
from gpuyard.scheduler.locality import copy_seconds
from gpuyard.scheduler.placement import Topology
from gpuyard.scheduler.snapshot import (
    Allocation,
    Member,
    PendingJob,
    Request,
    RunningJob,
    Snapshot,
)

__all__ = ["MAX_STEPS", "Budget", "Forecast", "forecast", "in_words", "predict"]

MAX_STEPS = 2_000
"""Scheduling cycles a prediction replays at most."""

_NEVER = (WaitCode.UNSATISFIABLE, WaitCode.POOL)


@dataclass(frozen=True, slots=True)
class Forecast:
    job_id: int
    start_at: float | None
    """When its workers should start (None: never, or only after jobs without a max runtime
    end): its placement, plus ``copy``."""
    now: bool = False
    """It is placed now (its workers start once ``copy`` is over)."""
    ahead: Sequence[int] = ()
    """Queued jobs that start before it (in :func:`forecast`, a view shared by every job's
    forecast: the replay's starts up to this job's, not a copy per job)."""
    waits_for: tuple[int, ...] = ()
    """Running jobs whose end frees the room it gets, or that it waits on with no known end."""
    never: str | None = None
    """Why it can never start, if so."""
    unknown: bool = False
    """No time can be given: it waits for jobs without a max runtime (``waits_for``), or the
    replay stopped before it started (``stopped``)."""
    stopped: str | None = None
    """Why the replay stopped before this job started, if it did ("within 2000 scheduling
    steps")."""
    copy: float = 0.0
    """Seconds its prepared data takes to copy to the nodes it is placed on, before its
    workers start (0: none, or its nodes hold it)."""


@dataclass(frozen=True, slots=True)
class Budget:
    """How much work a :func:`forecast` may do besides its steps; None is no bound. Both are
    checked before each replayed cycle, so a forecast overruns by at most one cycle."""

    considered: int | None = None
    """Job-considerations: the queued jobs of every replayed cycle, summed (a bound that
    does not depend on the machine)."""
    seconds: float | None = None
    """Time on ``clock``, from the forecast's start."""
    clock: Callable[[], float] | None = None
    """Where time is read (``time.monotonic``, or a test's fake): the scheduler reads no
    clock of its own."""

    def __post_init__(self) -> None:
        if self.seconds is not None and self.clock is None:
            raise ValueError("a time budget needs a clock: Budget(seconds=..., clock=...)")


def predict(snapshot: Snapshot, job_id: int, *, max_steps: int = MAX_STEPS) -> Forecast:
    """When job ``job_id`` (one of ``snapshot.pending``) should start."""
    found = _Forecaster(snapshot, {job_id}, max_steps, Budget()).run()[job_id]
    return replace(found, ahead=tuple(found.ahead))


def forecast(
    snapshot: Snapshot, *, max_steps: int = MAX_STEPS, budget: Budget | None = None
) -> dict[int, Forecast]:
    """The forecast of every queued job of ``snapshot`` (by job id, in queue order), from
    one replay: for each job, what :func:`predict` says, as long as the replay reached the
    job's start within ``max_steps`` cycles and the ``budget``; the others are ``unknown``,
    with the reason in ``stopped``."""
    asked = {job.id for job in snapshot.pending}
    found = _Forecaster(snapshot, asked, max_steps, budget or Budget()).run()
    return {job.id: found[job.id] for job in snapshot.pending}


class _Replay:
    """The state of the forward replay, and its moves: apply a cycle's decisions, jump to the
    next expected end. Pending and running jobs are kept in dicts in the order a snapshot
    lists them (started jobs run after the others; suspended ones queue after the others)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.base = snapshot
        self.topology = Topology(snapshot.nodes)
        """Shared by every cycle's ledger: the nodes do not change."""
        self.now = snapshot.now
        self.pending = {job.id: job for job in snapshot.pending}
        self.running = {job.id: job for job in snapshot.running}
        self.started: list[int] = []
        """Every start of the replay, in order (a job suspended and started again: twice)."""
        self.ended_on: dict[str, list[int]] = {}
        """Per node, the jobs that ended on it so far."""
        self._held: dict[str, frozenset[int]] | None = None
        self.cycles = 0
        # Jobs already on their way out leave at once (their room is what the next start uses).
        leaving = [job for job in snapshot.running if job.suspending]
        self.leaving = bool(leaving)
        self._end(leaving)

    def decide(self) -> Decisions:
        state = replace(
            self.base,
            now=self.now,
            pending=tuple(self.pending.values()),
            running=tuple(self.running.values()),
        )
        self.cycles += 1
        return decide_on(state, self.topology)

    def apply(self, decisions: Decisions) -> None:
        """The starts run until their max runtime; the suspended jobs go back to the queue at
        their original position."""
        for start in decisions.starts:
            job = self.pending.pop(start.job_id)
            self.started.append(job.id)
            self.running[job.id] = RunningJob(
                id=job.id,
                priority=job.priority,
                owner=job.owner,
                allocations=start.allocations,
                group=job.group,
                started_at=self.now,
                max_runtime=job.max_runtime,
                predicted_end=None if job.predicted is None else self.now + job.predicted,
                preemptible=True,
            )
        for p in decisions.preempts:
            victim = self.running.pop(p.job_id, None)
            if victim is not None:
                self.pending[victim.id] = _requeued(victim)

    def advance(self) -> bool:
        """Jump to the next expected end and free what ends then; False if nothing running
        has one (what is left waits for jobs without a max runtime)."""
        later = [
            end
            for end in (job.likely_end for job in self.running.values())
            if end is not None and end > self.now
        ]
        if not later:
            return False
        self.now = min(later)
        finished = [
            job
            for job in self.running.values()
            if (end := job.likely_end) is not None and end <= self.now
        ]
        for job in finished:
            del self.running[job.id]
        self._end(finished)
        return True

    def _end(self, jobs: list[RunningJob]) -> None:
        for job in jobs:
            self.running.pop(job.id, None)
            for node in dict.fromkeys(a.node for a in job.allocations):
                self.ended_on.setdefault(node, []).append(job.id)

    def freed(self, allocations: tuple[Allocation, ...]) -> tuple[int, ...]:
        """The jobs that ended, so far, on the nodes of ``allocations``."""
        ids: set[int] = set()
        for node in {a.node for a in allocations}:
            ids.update(self.ended_on.get(node, ()))
        return tuple(sorted(ids))

    def copy(self, start: Start) -> float:
        """Seconds the started job's prepared data takes to copy to its nodes."""
        needs = self.pending[start.job_id].datasets
        if not needs:
            return 0.0
        if self._held is None:
            self._held = {n.name: n.datasets for n in self.base.nodes}
        held = self._held
        nodes = {a.node for a in start.allocations}
        return copy_seconds(needs, (held.get(n, frozenset()) for n in nodes), self.base.copy_rate)

    def blockers(self) -> tuple[int, ...]:
        """Running jobs without a max runtime or a predicted end."""
        return tuple(sorted(job.id for job in self.running.values() if job.likely_end is None))


class _Forecaster:
    """Runs the replay until every job asked about is answered, or a bound is reached."""

    def __init__(
        self, snapshot: Snapshot, asked: Collection[int], max_steps: int, budget: Budget
    ) -> None:
        self.replay = _Replay(snapshot)
        self.open = set(asked)
        """Asked about and not answered yet."""
        self.found: dict[int, Forecast] = {}
        self.max_steps = max_steps
        self.budget = budget

    def run(self) -> dict[int, Forecast]:
        replay, budget = self.replay, self.budget
        began = budget.clock() if budget.clock is not None else 0.0
        considered = 0
        stopped = None
        while self.open:
            stopped = self._bound(considered, began)
            if stopped is not None:
                break
            considered += len(replay.pending)
            decisions = replay.decide()
            self._record(decisions)
            replay.apply(decisions)
            if decisions.preempts:
                continue  # the victims have left: decide again at the same time
            if not replay.advance():
                blockers = replay.blockers()
                ahead = _Prefix(replay.started, len(replay.started))
                for job_id in self.open:
                    self.found[job_id] = Forecast(
                        job_id, None, ahead=ahead, waits_for=blockers, unknown=True
                    )
                self.open.clear()
        ahead = _Prefix(replay.started, len(replay.started))
        for job_id in self.open:
            self.found[job_id] = Forecast(job_id, None, ahead=ahead, unknown=True, stopped=stopped)
        return self.found

    def _bound(self, considered: int, began: float) -> str | None:
        """Why the replay stops before its next cycle, if it does."""
        budget = self.budget
        if self.replay.cycles >= self.max_steps:
            return f"within {self.max_steps} scheduling steps"
        if budget.considered is not None and considered >= budget.considered:
            return (
                f"within the forecast's budget of {budget.considered} job-considerations "
                f"({self.replay.cycles} scheduling steps)"
            )
        if (
            budget.seconds is not None
            and budget.clock is not None
            and budget.clock() - began >= budget.seconds
        ):
            return (
                f"within the forecast's budget of {budget.seconds:g} s "
                f"({self.replay.cycles} scheduling steps)"
            )
        return None

    def _record(self, decisions: Decisions) -> None:
        """The first starts of the jobs asked about, and (in the first cycle) those that can
        never start: whether a job could ever fit depends only on the nodes, so a job that
        is not told so in the first cycle never is."""
        replay = self.replay
        first = replay.cycles == 1
        before = len(replay.started)
        for i, start in enumerate(decisions.starts):
            if start.job_id in self.open:
                self.open.discard(start.job_id)
                copy = replay.copy(start)
                self.found[start.job_id] = Forecast(
                    start.job_id,
                    replay.now + copy,
                    now=first and not replay.leaving,
                    ahead=_Prefix(replay.started, before + i),
                    waits_for=replay.freed(start.allocations),
                    copy=copy,
                )
        if first:
            for job_id in list(self.open):
                wait = decisions.waits.get(job_id)
                if wait is not None and wait.code in _NEVER:
                    self.open.discard(job_id)
                    self.found[job_id] = Forecast(job_id, None, never=wait.message)


class _Prefix(Sequence[int]):
    """The first ``length`` ids of a list that only grows: every job's ``ahead`` in a
    forecast is such a view of the one list of the replay's starts (a copy per job would
    make a forecast of n jobs hold n²/2 ids)."""

    __slots__ = ("_ids", "_length")

    def __init__(self, ids: list[int], length: int) -> None:
        self._ids = ids
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...
    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if not -self._length <= index < self._length:
            raise IndexError(index)
        return self._ids[index % self._length]

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(self._ids, self._length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Prefix | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


def _requeued(job: RunningJob) -> PendingJob:
    members = tuple(
        Member(len(a.gpus), a.cpus, a.memory, whole_node=a.exclusive) for a in job.allocations
    )
    return PendingJob(
        id=job.id,
        version=job.version,
        priority=job.priority,
        seq=job.id,
        owner=job.owner,
        request=Request(members),
        group=job.group,
        max_runtime=job.max_runtime,
        predicted=None
        if job.predicted_end is None
        else max(0.0, job.predicted_end - job.started_at),
    )


def in_words(
    forecast: Forecast,
    now: float,
    *,
    hidden_ahead: int = 0,
    hidden_waits: int = 0,
    within: tuple[float, float] | None = None,
) -> str:
    """The forecast as a sentence. ``forecast.ahead`` and ``waits_for`` are the jobs the
    reader may see; ``hidden_ahead`` and ``hidden_waits`` count the others, which are
    mentioned without their ids (docs/security.md, "What a user can see"). ``within``: the
    range of its start (earliest, latest), when the run times it waits on are predicted."""
    if forecast.never is not None:
        return f"it can never start: {forecast.never}"
    copied = f", its data copied first (about {format_duration(forecast.copy)})"
    copying = copied if forecast.copy else ""
    if forecast.now:
        return f"starts now{copying}"
    ahead = name_jobs(forecast.ahead, hidden_ahead)
    behind = f", behind {ahead}" if ahead else ""
    if forecast.start_at is not None and not math.isinf(forecast.start_at):
        about = format_duration(max(0.0, forecast.start_at - now))
        if within is not None and within[1] > within[0]:
            early, late = (format_duration(max(0.0, t - now)) for t in within)
            return f"starts in {early}–{late} (about {about}){copying}{behind}"
        return f"starts in about {about}{copying}{behind}"
    if forecast.waits_for or hidden_waits:
        which = name_jobs(forecast.waits_for, hidden_waits)
        return f"no start time can be given: it waits for {which}, with no max runtime{behind}"
    stopped = forecast.stopped or f"within {MAX_STEPS} scheduling steps"
    return f"no start time can be given {stopped}{behind}"
