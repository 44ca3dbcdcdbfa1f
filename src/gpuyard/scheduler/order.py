"""The order in which pending jobs are considered: tier, then fair share, then submission.

Inside a tier, the owner who holds the fewest GPUs for their share goes first (HAI: "within a
priority, users take turns"); among one owner's jobs, and between owners with equal usage, the
original submission order decides, which a suspended job keeps. Usage is live: when a job
starts during a cycle its owner's usage grows at once, so one cycle already alternates owners.

With predicted run times (``size``: a job's predicted remaining GPU-seconds, aged by its wait),
each owner's line is by size, smallest first, and the lines merge in one of two ways
(docs/scheduling.md#predicted-run-times):

* ``weigh``: the smallest job goes first, its size weighed by its owner's usage: each
  :data:`FAIR_GPUS` GPUs an owner holds for their share count their next job as big again, so an
  owner who holds much waits behind others' jobs of the same size, and a long wait shrinks any
  job's size until it is the smallest. For pools that do not time-slice: there the order is
  the whole policy.
* otherwise, fair share first and size second: in time-sliced pools, where the bands already
  rank jobs by the service they had, and measured better so on the shared traces.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter, lt
from typing import Any

from gpuyard.scheduler.snapshot import PendingJob, RunningJob

__all__ = ["FAIR_GPUS", "FairShare"]

FAIR_GPUS = 8.0
"""GPUs held (for one's share) that weigh an owner's next job as big again: one node's."""


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

    def visit(
        self,
        pending: Sequence[PendingJob],
        consider: Callable[[PendingJob], None],
        *,
        band: Callable[[PendingJob], int] | None = None,
        settle: Callable[[list[PendingJob], int], int] | None = None,
        size: Callable[[Sequence[PendingJob]], list[float]] | None = None,
        weigh: bool = True,
    ) -> None:
        """Call ``consider`` on each job, in order. It reads usage as it goes, so ``consider``
        charges a start before it returns. ``band`` splits each tier (time-slicing: the least
        served band first).

        ``settle(line, head)``, when given, is asked about an owner's line as soon as
        ``line[head]`` is next in it, which may be before that job's turn: it decides the jobs
        from ``head`` on that it can decide at once, and returns the index of the first one it
        did not. It may decide only jobs whose decision changes nothing (no start, no usage)
        and would be the same at their turn; taking such jobs out changes neither the order
        nor the usage the others are ordered by, and saves turning the heap once per job.

        ``size``: the sizes of jobs (their predicted remaining GPU-seconds, aged), or None:
        submission order. ``weigh``: how owners' lines merge by size (see the module doc)."""
        seqs = list(map(_SEQ, pending))
        if not all(map(lt, seqs, itertools.islice(seqs, 1, None))):
            # Each owner's line is in submission order: sort once (it usually is already).
            pending = sorted(pending, key=_SUBMISSION)
        # Tiers by rank: (priority, -band), or the priority alone (the same order) unbanded.
        tiers: defaultdict[Any, defaultdict[str, list[PendingJob]]] = defaultdict(_lines)
        if band is None:
            for job in pending:
                tiers[job.priority][job.owner].append(job)
        else:
            for job in pending:
                tiers[(job.priority, -band(job))][job.owner].append(job)
        for rank in sorted(tiers, reverse=True):
            if size is None:
                self._visit_tier(tiers[rank], consider, settle)
            else:
                self._visit_sized(tiers[rank], consider, settle, size, weigh)

    def _visit_tier(
        self,
        owners: Mapping[str, list[PendingJob]],
        consider: Callable[[PendingJob], None],
        settle: Callable[[list[PendingJob], int], int] | None,
    ) -> None:
        """One tier: a merge of the owners' lines on (usage / share, seq, owner)."""
        if len(owners) == 1:  # one owner: plain submission order, no heap needed
            line = next(iter(owners.values()))
            head = 0
            while head < len(line):
                if settle is not None:
                    head = settle(line, head)
                    if head == len(line):
                        break
                consider(line[head])
                head += 1
            return
        share = self._key

        def key(owner: str, head: int) -> tuple[float, int, str]:
            # Read at each turn: consider() may have charged a start to this owner.
            return (share(owner), owners[owner][head].seq, owner)

        _merge(owners, consider, settle, key)

    def _visit_sized(
        self,
        owners: Mapping[str, list[PendingJob]],
        consider: Callable[[PendingJob], None],
        settle: Callable[[list[PendingJob], int], int] | None,
        size: Callable[[Sequence[PendingJob]], list[float]],
        weigh: bool,
    ) -> None:
        """One tier by size: a merge of the owners' lines (each by size) on (size x (1 +
        usage / share / FAIR_GPUS), seq, owner) if ``weigh``, else on (usage / share, size,
        seq, owner)."""
        sizes: dict[str, list[float]] = {}
        for owner, line in owners.items():
            values = size(line)
            order = sorted(range(len(line)), key=values.__getitem__)  # stable: ties by seq
            line[:] = [line[i] for i in order]
            sizes[owner] = [values[i] for i in order]

        def key(owner: str, head: int) -> tuple[float, float, int, str]:
            share = self._key(owner)
            seq = owners[owner][head].seq
            if weigh:
                return (sizes[owner][head] * (1.0 + share / FAIR_GPUS), 0.0, seq, owner)
            return (share, sizes[owner][head], seq, owner)

        _merge(owners, consider, settle, key)


def _merge(
    owners: Mapping[str, list[PendingJob]],
    consider: Callable[[PendingJob], None],
    settle: Callable[[list[PendingJob], int], int] | None,
    key: Callable[[str, int], tuple[Any, ...]],
) -> None:
    """Merge the owners' lines: ``key(owner, head)`` ranks an owner whose next job is
    ``line[head]``, lowest first, and ends with the owner. Each line is read in place:
    ``heads[owner]`` is the index of its next job."""
    heads = dict.fromkeys(owners, 0)
    heap = [key(owner, 0) for owner in owners]
    heapq.heapify(heap)
    pop, replace = heapq.heappop, heapq.heapreplace
    while heap:
        owner = heap[0][-1]
        line = owners[owner]
        head = heads[owner]
        consider(line[head])
        head += 1
        if settle is not None and head < len(line):
            head = settle(line, head)
        if head < len(line):
            heads[owner] = head
            replace(heap, key(owner, head))
        else:
            pop(heap)


def _lines() -> defaultdict[str, list[PendingJob]]:
    return defaultdict(list)


_SEQ = attrgetter("seq")
_SUBMISSION = attrgetter("seq", "id")
