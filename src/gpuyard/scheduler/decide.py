"""``decide(snapshot) -> Decisions``: the scheduling policy, pure.

Version 1 rules:

1. Pending jobs go in order of priority tier (highest first), then submission order.
2. Each job is placed all-or-nothing (see :mod:`gpuyard.scheduler.placement`).
3. A job that cannot start now blocks every job after it, so a large job is never starved by a
   stream of small ones, and a higher tier blocks lower tiers (the reference's rule: "the
   resource supply for unscheduled low-priority tasks will be blocked"). Backfill will relax
   this for jobs that end before the blocked job's reserved start.
4. A job that could never fit the pool, even empty, does not block anyone; it waits with a
   reason that says why.

No I/O, no clock but ``snapshot.now``, no mutation of the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpuyard.scheduler.placement import Ledger
from gpuyard.scheduler.snapshot import Allocation, PendingJob, Snapshot

__all__ = ["Decisions", "Start", "Wait", "WaitCode", "decide", "queue_order"]


class WaitCode(StrEnum):
    RESOURCES = "resources"
    """Not enough free resources right now."""
    BLOCKED = "blocked"
    """Behind a job that goes first (higher tier or earlier) and is itself waiting."""
    UNSATISFIABLE = "unsatisfiable"
    """Larger than the pool could ever offer."""


@dataclass(frozen=True, slots=True)
class Start:
    job_id: int
    version: int
    allocations: tuple[Allocation, ...]


@dataclass(frozen=True, slots=True)
class Wait:
    job_id: int
    code: WaitCode
    message: str


@dataclass(slots=True)
class Decisions:
    starts: list[Start] = field(default_factory=list)
    waits: dict[int, Wait] = field(default_factory=dict)


def queue_order(job: PendingJob) -> tuple[int, int]:
    return (-job.priority, job.seq)


def decide(snapshot: Snapshot) -> Decisions:
    ledger = Ledger(snapshot.nodes, snapshot.running)
    decisions = Decisions()
    blocker: PendingJob | None = None
    for job in sorted(snapshot.pending, key=queue_order):
        never = ledger.could_ever_fit(job.request)
        if never is not None:
            decisions.waits[job.id] = Wait(job.id, WaitCode.UNSATISFIABLE, never)
            continue
        if blocker is not None:
            decisions.waits[job.id] = Wait(
                job.id,
                WaitCode.BLOCKED,
                f"waiting behind job {blocker.id}, which goes first and does not fit yet",
            )
            continue
        allocations = ledger.place(job.request)
        if allocations is None:
            blocker = job
            decisions.waits[job.id] = Wait(job.id, WaitCode.RESOURCES, _not_enough(job))
            continue
        ledger.commit(allocations)
        decisions.starts.append(Start(job.id, job.version, allocations))
    return decisions


def _not_enough(job: PendingJob) -> str:
    members = job.request.members
    first = members[0]
    if len(set(members)) == 1 and first.whole_node:
        return f"waiting for {len(members)} whole free nodes with {first.gpus} GPUs each"
    if len(members) == 1:
        return f"waiting for a node with {first.gpus} free GPUs and {first.cpus:g} free CPUs"
    return f"waiting for room for its {len(members)} workers ({job.request.gpus} GPUs in all)"
