"""The order in which pending jobs are considered: tier, then fair share, then submission.

Inside a tier, the owner who holds the fewest GPUs for their share goes first (HAI: "within a
priority, users take turns"); among one owner's jobs, and between owners with equal usage, the
original submission order decides, which a suspended job keeps. Usage is live: when a job
starts during a cycle its owner's usage grows at once, so one cycle already alternates owners.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping

from gpuyard.scheduler.snapshot import PendingJob, RunningJob

__all__ = ["FairShare"]


class FairShare:
    def __init__(self, running: Iterable[RunningJob], shares: Mapping[str, float]) -> None:
        self.shares = shares
        self.usage: dict[str, float] = {}
        for job in running:
            self.usage[job.owner] = self.usage.get(job.owner, 0.0) + job.gpus

    def charge(self, owner: str, gpus: int) -> None:
        self.usage[owner] = self.usage.get(owner, 0.0) + gpus

    def _key(self, owner: str) -> float:
        return self.usage.get(owner, 0.0) / (self.shares.get(owner) or 1.0)

    def order(
        self,
        pending: Iterable[PendingJob],
        band: Callable[[PendingJob], int] | None = None,
    ) -> Iterator[PendingJob]:
        """Jobs in the order to consider them; reads usage as it goes, so charge a start
        before asking for the next job. ``band`` splits each tier (time-slicing: the least
        served band first)."""
        tiers: dict[tuple[int, int], dict[str, list[PendingJob]]] = {}
        for job in pending:
            rank = (job.priority, -band(job) if band else 0)
            tiers.setdefault(rank, {}).setdefault(job.owner, []).append(job)
        for tier in sorted(tiers, reverse=True):
            queues = {
                owner: deque(sorted(jobs, key=lambda j: (j.seq, j.id)))
                for owner, jobs in tiers[tier].items()
            }
            if len(queues) == 1:  # one owner: plain submission order, no heap needed
                yield from next(iter(queues.values()))
                continue
            heap = [(self._key(o), q[0].seq, o) for o, q in queues.items()]
            heapq.heapify(heap)
            usage, shares = self.usage, self.shares
            pop, push = heapq.heappop, heapq.heappush
            while heap:
                _, _, owner = pop(heap)
                queue = queues[owner]
                yield queue.popleft()
                if queue:
                    share = usage.get(owner, 0.0) / (shares.get(owner) or 1.0)
                    push(heap, (share, queue[0].seq, owner))
