"""``decide(snapshot) -> Decisions``: the scheduling policy, pure.

One cycle considers every pending job once, in :mod:`~gpuyard.scheduler.order` (tier, fair
share, submission), and for each:

1. A job that could never fit its nodes, even empty, waits with the reason; it blocks no one.
2. A job over its owner's or group's quota at its tier waits (quota); it blocks no one.
3. Otherwise it starts if one of its choices (its spec, its alternative specs in order, or an
   elastic job's sizes from largest to smallest) fits now *around the reservations of the jobs
   before it*: a placement may use resources held for a waiting job only if the job's max
   runtime ends before that reservation begins (backfill).
4. A job that cannot start, in a pool whose policy is ``suspend``, may take the place of
   running jobs of lower tiers: the victims that free the room with the least lost work are
   told to suspend, and the room is held for it meanwhile.
5. Any other job that cannot start reserves the soonest room it could have, computed from the
   max runtimes of what runs (unknown ends count as never). Later jobs go around it. So a
   higher tier blocks lower unscheduled jobs only where it needs the room (docs/scheduling.md), and
   a large job is never starved by a stream of small ones.

After the queue, elastic jobs grow toward their max when idle nodes of their pool are left
over that nobody holds (a grow is a suspension and a resume at the new size).

No I/O, no clock but ``snapshot.now``, no mutation of the snapshot, and no process-wide
switch: the garbage collector stays on (a caller with a large snapshot keeps the collector off
it with :func:`~gpuyard.scheduler.collector.frozen_heap`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpuyard.models.waiting import WaitCode
from gpuyard.quantities import counted, format_duration
from gpuyard.scheduler.locality import copy_seconds
from gpuyard.scheduler.order import FairShare
from gpuyard.scheduler.placement import INFINITY, Ledger, Topology
from gpuyard.scheduler.preemption import choose_victims
from gpuyard.scheduler.quota import QuotaBook
from gpuyard.scheduler.snapshot import (
    ANYWHERE,
    Allocation,
    Constraint,
    Member,
    PendingJob,
    PoolPolicy,
    Preemption,
    Request,
    RunningJob,
    Snapshot,
)

__all__ = [
    "MAX_PREEMPTIONS",
    "MAX_RESERVATIONS",
    "Decisions",
    "Grow",
    "Preempt",
    "Start",
    "Wait",
    "WaitCode",
    "decide",
    "decide_on",
]

MAX_RESERVATIONS = 16
"""Waiting jobs per cycle that reserve room; later ones wait without (they move up as the
ones before them start)."""
MAX_PREEMPTIONS = 16
"""Waiting jobs per cycle that may look for victims."""
UNKNOWN_SIZE = 30 * 24 * 3600.0
"""Seconds taken as the run time of a job with neither a prediction nor a max runtime, for
the order: after every predicted job of its size up to a month, aging as they do."""
SIZE_HALFLIFE = 3 * 3600.0
"""The wait that halves a job's size in a pool without an ``age_halflife``."""
PROTECTED = 1
"""The band rank (higher is safer) of a running job that no job of its tier may suspend
(within its quantum): above every waiting job's (0 at best)."""


@dataclass(frozen=True, slots=True)
class Fit:
    """What one cycle knows about a request shape (with a constraint): whether it could fit
    at all, whether it failed to fit now, or why it never can."""

    may_fit: bool
    """An empty pool could hold it."""
    full: bool = False
    """It did not fit now, not even ignoring reservations; resources only shrink within a
    cycle, so it will not fit later in the cycle either."""
    never: str = ""
    """Why it can never fit (when it cannot)."""


MAY_FIT = Fit(may_fit=True)
FULL = Fit(may_fit=True, full=True)


@dataclass(frozen=True, slots=True, init=False)
class Start:
    job_id: int
    version: int
    allocations: tuple[Allocation, ...]
    choice: int = 0
    """Which of the job's choices (``PendingJob.choices()``) it starts with."""

    def __init__(
        self, job_id: int, version: int, allocations: tuple[Allocation, ...], choice: int = 0
    ) -> None:
        # Set the slots directly (see Resources.__init__): a cycle makes thousands.
        _set_start_job_id(self, job_id)
        _set_start_version(self, version)
        _set_start_allocations(self, allocations)
        _set_start_choice(self, choice)


_set_start_job_id, _set_start_version, _set_start_allocations, _set_start_choice = (
    vars(Start)[name].__set__ for name in ("job_id", "version", "allocations", "choice")
)


def _start(job_id: int, version: int, allocations: tuple[Allocation, ...], choice: int) -> Start:
    """``Start(...)`` made without calling the class (see :func:`_wait`)."""
    start = _new(Start)
    _set_start_job_id(start, job_id)
    _set_start_version(start, version)
    _set_start_allocations(start, allocations)
    _set_start_choice(start, choice)
    return start


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: int
    version: int
    for_job: int
    reason: str


@dataclass(frozen=True, slots=True)
class Grow:
    """Suspend an elastic job so that it resumes on ``nodes`` nodes."""

    job_id: int
    version: int
    nodes: int
    reason: str


@dataclass(frozen=True, slots=True, init=False)
class Wait:
    job_id: int
    code: WaitCode
    message: str
    start_at: float | None = None
    """When it is expected to start, where a reservation says so."""

    def __init__(
        self, job_id: int, code: WaitCode, message: str, start_at: float | None = None
    ) -> None:
        # Set the slots directly (see Resources.__init__).
        _set_job_id(self, job_id)
        _set_code(self, code)
        _set_message(self, message)
        _set_start_at(self, start_at)


_set_job_id, _set_code, _set_message, _set_start_at = (
    vars(Wait)[name].__set__ for name in ("job_id", "code", "message", "start_at")
)


def _wait(job_id: int, code: WaitCode, message: str, start_at: float | None = None) -> Wait:
    """``Wait(job_id, code, message, start_at)``, made without calling the class: a cycle
    makes one per waiting job, and calling a class with a Python ``__init__`` costs about as
    much again as setting its slots."""
    wait = _new(Wait)
    _set_job_id(wait, job_id)
    _set_code(wait, code)
    _set_message(wait, message)
    _set_start_at(wait, start_at)
    return wait


_new = object.__new__


@dataclass(slots=True)
class Decisions:
    starts: list[Start] = field(default_factory=list)
    waits: dict[int, Wait] = field(default_factory=dict)
    preempts: list[Preempt] = field(default_factory=list)
    grows: list[Grow] = field(default_factory=list)


@dataclass(slots=True)
class _Reservation:
    job: PendingJob
    start: float
    nodes: frozenset[str]


@dataclass(slots=True)
class _Shape:
    """What one cycle knows about one request shape under one constraint."""

    fit: Fit
    policy: PoolPolicy
    """The policy of the constraint's pool."""
    waiting: str | None = None
    """Why a job of this shape waits, once the cycle makes no more reservations (the same
    for every such job from then on)."""
    verdict: tuple[WaitCode, str, bool] | None = None
    """How every later job of this shape waits, if that is known (see :meth:`_Cycle.settle`):
    (code, message, whether a quota could come first). Known for a shape that never fits,
    and for one that did not fit once the cycle makes no more reservations and looks for no
    more victims in its pool (``waiting``, then)."""


class _Cycle:
    def __init__(self, snapshot: Snapshot, topology: Topology | None = None) -> None:
        self.snapshot = snapshot
        self.now = snapshot.now
        self.sliced = frozenset(name for name, p in snapshot.pools.items() if p.slices)
        """Pools where predictions order the queue but time nothing (see :class:`Ledger`)."""
        self.ledger = Ledger(
            snapshot.nodes,
            snapshot.running,
            snapshot.now,
            topology=topology,
            unpredicted=self.sliced,
        )
        self.predicted = any(job.predicted is not None for job in snapshot.pending)
        """Whether the queue is ordered by predicted sizes (:mod:`~.order`)."""
        self._halves: dict[str, float] = {}
        """The half-life that ages sizes, per pool."""
        self.quotas = QuotaBook(snapshot.quotas, snapshot.running)
        self.limited = self.quotas.users | self.quotas.groups
        """Every user or group that a quota names (at some tier)."""
        self.fair = FairShare(snapshot.running, snapshot.shares)
        self.decisions = Decisions()
        self.waits = self.decisions.waits
        self.running = list(snapshot.running)
        self.leaving: set[int] = {j.id for j in snapshot.running if j.suspending}
        self.shapes: dict[Constraint, dict[int, _Shape]] = {}
        """What this cycle knows of each shape, per constraint (see :class:`_Shape`)."""
        self._last: tuple[Constraint, dict[int, _Shape]] = (ANYWHERE, {})
        """The last constraint looked up and its shapes: jobs share constraint objects (the
        loader makes one per distinct constraint), and an identity test is cheaper than the
        hash of a constraint (a Python method)."""
        self.shapes[ANYWHERE] = self._last[1]
        self.short: dict[int, str] = {}
        """Waiting messages by request shape ("waiting for a node with …")."""
        self.reservations: list[_Reservation] = []
        self.candidate_names: dict[Constraint, frozenset[str]] = {}
        self.blockers: dict[Constraint, tuple[int, PendingJob | None]] = {}
        self.no_room: set[tuple[Constraint, int]] = set()
        """(constraint, shape) that found no room for a reservation in this cycle."""
        """Per constraint: how many reservations were checked, and the first that blocks."""
        self.policies: dict[str, PoolPolicy] = {}
        self.preemption_tries = 0
        self.slicing = any(p.slices for p in snapshot.pools.values())
        self._lowest_running: dict[str, tuple[int, int]] | None = None

    @property
    def lowest_running(self) -> dict[str, tuple[int, int]]:
        """Per pool, the lowest (tier, -band) of its running jobs: nobody ranked at or below
        it can suspend anyone there (computed when a job first looks for victims)."""
        if self._lowest_running is None:
            lowest: dict[str, tuple[int, int]] = {}
            for job in self.snapshot.running:
                # Suspending jobs count too: a job may be waiting for them to leave.
                if job.preemptible or job.suspending:
                    for a in job.allocations[:1]:
                        node = self.ledger.by_name.get(a.node)
                        if node is not None:
                            rank = self.running_rank(job, node.pool)
                            low = lowest.get(node.pool)
                            lowest[node.pool] = rank if low is None else min(low, rank)
            self._lowest_running = lowest
        return self._lowest_running

    def pending_band(self, job: PendingJob) -> int:
        """0 for the least served. With the pool's ``age_halflife``, the service a job is
        ranked by halves for every half-life it has waited: the starvation guard of
        least-attained-service."""
        policy = self.policy(job.constraint.pool)
        service = job.attained
        if policy.age_halflife and job.queued_since is not None and service:
            return policy.band(policy.aged(service, self.now - job.queued_since, job.request.gpus))
        return policy.band(service)

    def pending_rank(self, job: PendingJob) -> tuple[int, int]:
        """Higher goes first: the tier, then (time-slicing) the least served band."""
        return (job.priority, -self.pending_band(job) if self.slicing else 0)

    def running_rank(self, job: RunningJob, pool: str) -> tuple[int, int]:
        """A running job may be suspended by a waiting job of a higher rank."""
        if not self.slicing:
            return (job.priority, 0)
        policy = self.policy(pool)
        ran = self.now - job.started_at
        if policy.min_run and ran < policy.quantum(job.suspensions):
            return (job.priority, PROTECTED)
        attained = job.attained
        if policy.age_halflife and attained:
            # Ranked as it was when it started (aged by its wait), plus what it has had since.
            attained = policy.aged(attained, job.queued, job.gpus)
        return (job.priority, -policy.band(attained + job.gpus * max(0.0, ran)))

    def sizes(self, jobs: Sequence[PendingJob]) -> list[float]:
        """Each job's place in its tier when run times are predicted: its remaining
        GPU-seconds (predicted, and no more than its max runtime; else the largest a job may
        be), halved for every ``age_halflife`` it has waited (so nothing starves). Outside
        time-sliced pools a job that was suspended (it has had service) is 0: it resumes at
        the head of its owner's line, before the jobs submitted after it (docs/preemption.md),
        whatever their size; in a time-sliced pool the bands already rank it by the service
        it had, and its size is what it has left, like any other job's."""
        now, halves, out = self.now, self._halves, []
        for job in jobs:
            if job.attained > 0 and job.constraint.pool not in self.sliced:
                out.append(0.0)
                continue
            seconds, cap = job.predicted, job.max_runtime
            if cap is not None and (seconds is None or cap < seconds):
                seconds = cap
            size = (UNKNOWN_SIZE if seconds is None else seconds) * (job.request.gpus or 1)
            since = job.queued_since
            if since is not None and now > since:
                pool = job.constraint.pool
                half = halves.get(pool)
                if half is None:
                    half = halves[pool] = self.policy(pool).age_halflife or SIZE_HALFLIFE
                size *= 0.5 ** ((now - since) / half)
            out.append(size)
        return out

    def end_of(self, job: PendingJob) -> float:
        """When a job started now would end, for backfill: at its max runtime, else (outside
        time-sliced pools) when it is predicted to, else never."""
        if job.max_runtime is not None:
            return self.now + job.max_runtime
        if job.predicted is not None and job.constraint.pool not in self.sliced:
            return self.now + job.predicted
        return INFINITY

    def policy(self, pool: str) -> PoolPolicy:
        found = self.policies.get(pool)
        if found is None:
            found = self.policies[pool] = self.snapshot.pool(pool)
        return found

    # -- the queue ------------------------------------------------------------------------

    def run(self) -> Decisions:
        band = self.pending_band if self.slicing else None
        size = self.sizes if self.predicted else None
        self.fair.visit(
            self.snapshot.pending,
            self.consider,
            band=band,
            settle=self.settle,
            size=size,
            weigh=not self.slicing,
        )
        self.grow_elastic()
        return self.decisions

    def settle(self, line: list[PendingJob], head: int) -> int:
        """Decide the jobs of an owner's line from ``head`` on whose decision is known
        already, changes nothing, and would be the same at their turn; the index of the first
        one that is not. The fair-share order asks as soon as ``line[head]`` is next in its
        owner's line, maybe before its turn (:meth:`FairShare.visit`). The common job only, of
        a shape seen before:

        * a shape that can never fit;
        * a shape that did not fit, once the cycle makes no more reservations and looks for
          no more victims (:attr:`_Shape.verdict`): resources only shrink within a cycle, so
          it waits, with the same message, whenever it comes;
        * and, for an owner with a quota, see :meth:`settle_limited`.
        """
        waits, limited = self.waits, self.limited
        last, shapes = self._last
        for job in itertools.islice(line, head, None):
            if job.alternatives or job.min_nodes is not None:
                break
            constraint = job.constraint
            if constraint is not last:
                shapes = self.shapes_of(constraint)
                last = constraint
            shape = shapes.get(job.request.shape_id)
            verdict = None if shape is None else shape.verdict
            if verdict is None:
                break
            code, message, quota_first = verdict
            if quota_first and limited and (job.owner in limited or job.group in limited):
                if not self.settle_limited(job, code, message):
                    break
            else:
                # _wait(), inline: this loop makes most of a cycle's waits.
                wait = _new(Wait)
                _set_job_id(wait, job.id)
                _set_code(wait, code)
                _set_message(wait, message)
                _set_start_at(wait, None)
                waits[job.id] = wait
            head += 1
        return head

    def settle_limited(self, job: PendingJob, code: WaitCode, message: str) -> bool:
        """:meth:`settle` for a job whose owner or group has a quota. Over its owner's quota,
        it waits: nobody else's start changes what the owner holds at the tier, and the
        owner's next start would be this job. Not so for a group's quota: it is left to its
        turn."""
        quotas = self.quotas
        if quotas.group_limited(job.group, job.priority):
            return False
        if quotas.user_limited(job.owner, job.priority):
            over = quotas.check(job.owner, job.group, job.priority, job.request)
            if over is not None:
                code, message = WaitCode.QUOTA, over
        self.waits[job.id] = _wait(job.id, code, message)
        return True

    def refresh(self, shape: _Shape) -> None:
        """Whether jobs of ``shape`` can only wait now, and how (:attr:`_Shape.verdict`)."""
        if (
            shape.fit is FULL
            and shape.waiting is not None
            and (
                shape.policy.preemption is not Preemption.SUSPEND
                or self.preemption_tries >= MAX_PREEMPTIONS
            )
        ):
            shape.verdict = (WaitCode.RESOURCES, shape.waiting, True)

    def shapes_of(self, constraint: Constraint) -> dict[int, _Shape]:
        """What the cycle knows of the shapes of jobs with this constraint, by shape id."""
        last, shapes = self._last
        if constraint is not last:
            found = self.shapes.get(constraint)
            if found is None:
                found = self.shapes[constraint] = {}
            shapes = found
            self._last = (constraint, shapes)
        return shapes

    def consider(self, job: PendingJob) -> None:
        if job.blocked is not None:
            code, reason = job.blocked
            self.waits[job.id] = _wait(job.id, code, reason)
            return
        if job.alternatives or job.min_nodes is not None:
            self.consider_choices(job)
            return
        # The common job, one request: the steps of consider_choices, without the lists.
        request = job.request
        constraint = job.constraint
        last, shapes = self._last
        if constraint is not last:
            shapes = self.shapes_of(constraint)
        shape = shapes.get(request.shape_id) or self.shape(constraint, request)
        fit = shape.fit
        if not fit.may_fit:
            self.never_fits(job, [fit.never])
            return
        quotas = self.quotas
        if quotas.limits:
            over = quotas.check(job.owner, job.group, job.priority, request)
            if over is not None:
                self.waits[job.id] = _wait(job.id, WaitCode.QUOTA, over)
                return
        held_back = False
        policy = shape.policy
        if fit is MAY_FIT:
            end = self.end_of(job)
            same_zone = policy.same_zone
            allocations = self.place(job, request, same_zone=same_zone, end=end)
            if allocations is not None:
                self.start(job, request, allocations, 0, end)
                return
            if self.ledger.holds and self.ledger.place(
                request, constraint, same_zone=same_zone, ignore_holds=True
            ):
                held_back = True
            else:
                shape.fit = FULL
                self.refresh(shape)
        if policy.preemption is Preemption.SUSPEND and self.try_preemption(job, (request,)):
            return
        self.reserve(job, (request,), held_back)

    def place(
        self, job: PendingJob, request: Request, *, same_zone: bool, end: float
    ) -> tuple[Allocation, ...] | None:
        """Where ``request`` of ``job`` would start now, preferring among equally good nodes
        those holding its image and prepared data; None if it does not fit now."""
        return self.ledger.place(
            request,
            job.constraint,
            same_zone=same_zone,
            end=end,
            image=job.image,
            datasets=job.datasets,
        )

    def consider_choices(self, job: PendingJob) -> None:
        """A job with alternative specs or elastic sizes: each choice in order."""
        constraint = job.constraint
        policy = self.policy(constraint.pool)
        same_zone = policy.same_zone
        choices = job.choices()
        known = self.shapes_of(constraint)
        shapes = [known.get(r.shape_id) or self.shape(constraint, r) for r in choices]
        if not any(s.fit.may_fit for s in shapes):
            self.never_fits(job, [s.fit.never for s in shapes])
            return
        if self.quotas.limits:
            over = self.quotas.check(job.owner, job.group, job.priority, job.smallest())
            if over is not None:
                self.waits[job.id] = _wait(job.id, WaitCode.QUOTA, over)
                return
        end = self.end_of(job)
        held_back = False
        for i, request in enumerate(choices):
            if shapes[i].fit is not MAY_FIT or (
                i and self.quotas.check(job.owner, job.group, job.priority, request)
            ):
                continue
            allocations = self.place(job, request, same_zone=same_zone, end=end)
            if allocations is None:
                if self.ledger.holds and self.ledger.place(
                    request, constraint, same_zone=same_zone, ignore_holds=True
                ):
                    held_back = True
                else:
                    shapes[i].fit = FULL
                    self.refresh(shapes[i])
                continue
            self.start(job, request, allocations, i, end)
            return
        if policy.preemption is Preemption.SUSPEND and self.try_preemption(job, choices):
            return
        self.reserve(job, choices, held_back)

    def shape(self, constraint: Constraint, request: Request) -> _Shape:
        """What the cycle knows of a new (constraint, shape): whether it could ever fit
        (computed once per cycle and shape)."""
        policy = self.policy(constraint.pool)
        reason = self.ledger.could_ever_fit(request, constraint, same_zone=policy.same_zone)
        fit = MAY_FIT if reason is None else Fit(may_fit=False, never=reason)
        shape = self.shapes_of(constraint)[request.shape_id] = _Shape(fit, policy)
        if reason is not None:  # what never_fits() says for a job with one request
            code = WaitCode.POOL if constraint.narrowed else WaitCode.UNSATISFIABLE
            shape.verdict = (code, reason, False)
        return shape

    def never_fits(self, job: PendingJob, reasons: list[str]) -> None:
        code = WaitCode.POOL if job.constraint.narrowed else WaitCode.UNSATISFIABLE
        self.wait(job, code, "; ".join(dict.fromkeys(reasons)))

    def start(
        self,
        job: PendingJob,
        request: Request,
        allocations: tuple[Allocation, ...],
        choice: int,
        end: float,
    ) -> None:
        self.ledger.commit(allocations, end)
        self.quotas.charge(job.owner, job.group, job.priority, request)
        self.fair.charge(job.owner, request.gpus)
        self.decisions.starts.append(_start(job.id, job.version, allocations, choice))

    def wait(
        self, job: PendingJob, code: WaitCode, message: str, start_at: float | None = None
    ) -> None:
        self.waits[job.id] = _wait(job.id, code, message, start_at)

    # -- preemption -----------------------------------------------------------------------

    def try_preemption(self, job: PendingJob, choices: tuple[Request, ...]) -> bool:
        pool = job.constraint.pool
        lowest = self.lowest_running.get(pool)
        rank = self.pending_rank(job)
        if lowest is None or lowest >= rank or self.preemption_tries >= MAX_PREEMPTIONS:
            return False
        self.preemption_tries += 1
        if self.preemption_tries == MAX_PREEMPTIONS:  # no victims from now on: more dead shapes
            for shapes in self.shapes.values():
                for shape in shapes.values():
                    self.refresh(shape)
        policy = self.policy(job.constraint.pool)
        order = sorted(choices, key=lambda r: (r.nodes, r.gpus)) if job.min_nodes else choices
        for request in order:
            plan = choose_victims(
                self.ledger,
                request,
                job.constraint,
                running=self.running,
                eligible=lambda r: (
                    r.preemptible and self.running_rank(r, pool) < rank and r.id not in self.leaving
                ),
                same_zone=policy.same_zone,
                now=self.now,
            )
            if plan is None:
                continue
            if not plan.victims and not plan.waits_for:
                continue  # it fits without anyone leaving: only holds stand in the way
            for victim in plan.victims:
                self.leaving.add(victim.id)
                why = (
                    "a higher priority"
                    if victim.priority < job.priority
                    else "time-sharing: it has had less GPU time"
                )
                self.decisions.preempts.append(
                    Preempt(
                        victim.id,
                        victim.version,
                        job.id,
                        f"suspended to make room for job {job.id} ({why})",
                    )
                )
            self.running = [
                _leaving(r) if r.id in self.leaving and not r.suspending else r
                for r in self.running
            ]
            self.ledger.reserve(job.id, self.now, plan.allocations)
            self.reservations.append(
                _Reservation(job, self.now, frozenset(a.node for a in plan.allocations))
            )
            ids = sorted({v.id for v in plan.victims} | set(plan.waits_for))
            self.wait(
                job,
                WaitCode.PREEMPTING,
                f"waiting for job{'s' if len(ids) > 1 else ''} {_ids(ids)} to suspend and "
                "free its room",
                self.now,
            )
            return True
        return False

    # -- reservations ---------------------------------------------------------------------

    def reserve(self, job: PendingJob, choices: tuple[Request, ...], held_back: bool) -> None:
        request = choices[-1] if job.min_nodes else choices[0]
        full = len(self.reservations) >= MAX_RESERVATIONS
        if full and not held_back:
            # No more reservations this cycle, so nothing below changes for this shape.
            shape = self.shapes_of(job.constraint)[request.shape_id]
            known = shape.waiting
            if known is None:
                known = shape.waiting = self.resources_reason(job, request)
                self.refresh(shape)
            self.waits[job.id] = _wait(job.id, WaitCode.RESOURCES, known)
            return
        blocker = self.blocker(job)
        if held_back and blocker is not None:
            code = WaitCode.PRIORITY if blocker.priority > job.priority else WaitCode.RESERVED
            reason = (
                f"the room it could use is held for job {blocker.id}, which goes first"
                + (" (a higher priority)" if code is WaitCode.PRIORITY else "")
                + "; a max runtime that ends before that job starts would let it run now"
            )
        else:
            code, reason = WaitCode.RESOURCES, self.resources_reason(job, request, blocker)
        start_at = None
        if not full:
            policy = self.policy(job.constraint.pool)
            # Holds and starts only add up during a cycle: a shape that found no room for a
            # reservation will find none later in it.
            unplaceable = (job.constraint, request.shape_id)
            found = (
                None
                if unplaceable in self.no_room
                else self.ledger.earliest(request, job.constraint, same_zone=policy.same_zone)
            )
            if found is None:
                self.no_room.add(unplaceable)
            if found is not None and math.isinf(found[0]) and policy.slices:
                # No start time is known, so holding room would only drain nodes. A
                # time-sliced pool needs no drain against starvation: the jobs ahead rise
                # to higher bands as they are served, and this one may then suspend them.
                found = None
            if found is not None:
                start, allocations = found
                self.ledger.reserve(job.id, start, allocations)
                self.reservations.append(
                    _Reservation(job, start, frozenset(a.node for a in allocations))
                )
                if not math.isinf(start):
                    start_at, reason = self.expected_start(job, start, allocations, reason)
        self.wait(job, code, reason, start_at)

    def expected_start(
        self, job: PendingJob, start: float, allocations: tuple[Allocation, ...], reason: str
    ) -> tuple[float, str]:
        """When the reserved job's workers should start (its placement at ``start``, then the
        copy of the prepared data its reserved nodes lack), and ``reason`` saying so."""
        by_name = self.ledger.by_name
        copy = copy_seconds(
            job.datasets,
            (by_name[name].capacity.datasets for name in {a.node for a in allocations}),
            self.snapshot.copy_rate,
        )
        reason += f"; expected to start in about {format_duration(start + copy - self.now)}"
        if copy:
            reason += f" (its data copied first, about {format_duration(copy)})"
        return start + copy, reason

    def resources_reason(
        self, job: PendingJob, request: Request, blocker: PendingJob | None = None
    ) -> str:
        reason = self.short.get(request.shape_id)
        if reason is None:
            reason = self.short[request.shape_id] = _not_enough(request)
        blocker = blocker or self.blocker(job)
        if blocker is not None:
            reason += f"; behind job {blocker.id}, which goes first"
        return reason

    def blocker(self, job: PendingJob) -> PendingJob | None:
        """The first job before this one that holds room on the nodes it could use."""
        if not self.reservations:
            return None
        # Reservations are only added during a cycle: the first one found for a constraint
        # stays its answer, and a constraint found clear of k reservations need only be
        # checked against those made since.
        checked, found = self.blockers.get(job.constraint, (0, None))
        if found is None and checked < len(self.reservations):
            names = self.candidate_names.get(job.constraint)
            if names is None:
                names = frozenset(n.capacity.name for n in self.ledger.candidates(job.constraint))
                self.candidate_names[job.constraint] = names
            found = next(
                (r.job for r in self.reservations[checked:] if not r.nodes.isdisjoint(names)),
                None,
            )
            self.blockers[job.constraint] = (len(self.reservations), found)
        return found

    # -- elastic --------------------------------------------------------------------------

    def grow_elastic(self) -> None:
        for job in self.snapshot.running:
            if (
                job.max_nodes is None
                or job.nodes >= job.max_nodes
                or job.suspending
                or job.id in self.leaving
                or not job.preemptible
            ):
                continue
            first = self.ledger.by_name.get(job.allocations[0].node) if job.allocations else None
            if first is None:
                continue
            policy = self.policy(first.pool)
            if self.now < job.started_at + policy.grow_after:
                continue
            member = Member(
                len(job.allocations[0].gpus),
                job.allocations[0].cpus,
                job.allocations[0].memory,
                whole_node=True,
            )
            zone = first.capacity.zone
            spare = [
                n
                for n in self.ledger.nodes
                if n.capacity.schedulable
                and n.pool == first.pool
                and n.holders == 0
                and not n.holds
                and (not policy.same_zone or n.capacity.zone == zone)
                and n.fits_now(member)
            ]
            if not spare:
                continue
            target = min(job.max_nodes, job.nodes + len(spare))
            # The spare nodes are spoken for: the job takes them when it resumes.
            self.ledger.reserve(
                job.id,
                self.now,
                [
                    Allocation(n.capacity.name, (), 0.0, 0, True)
                    for n in spare[: target - job.nodes]
                ],
            )
            self.decisions.grows.append(
                Grow(
                    job.id,
                    job.version,
                    target,
                    f"grown from {job.nodes} to {target} nodes: {len(spare)} idle node(s) in "
                    f"pool {first.pool!r}",
                )
            )


def _leaving(job: RunningJob) -> RunningJob:
    return replace(job, suspending=True)


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids)


def _not_enough(request: Request) -> str:
    members = request.members
    first = members[0]
    if len(set(members)) == 1 and first.whole_node:
        each = f" with {counted(first.gpus, 'GPU')} each" if first.gpus else ""
        return f"waiting for {len(members)} whole free nodes{each}"
    if len(members) == 1:
        gpus = f"{counted(first.gpus, 'free GPU')} and " if first.gpus else ""
        return f"waiting for a node with {gpus}{counted(first.cpus, 'free CPU')}"
    return f"waiting for room for its {len(members)} workers ({request.gpus} GPUs in all)"


def decide(snapshot: Snapshot) -> Decisions:
    """The decisions of one scheduling cycle over ``snapshot``."""
    return decide_on(snapshot, None)


def decide_on(snapshot: Snapshot, topology: Topology | None) -> Decisions:
    """:func:`decide`, given the :class:`Topology` of ``snapshot.nodes`` if the caller keeps
    one (a forward replay decides many snapshots of the same nodes)."""
    return _Cycle(snapshot, topology).run()
