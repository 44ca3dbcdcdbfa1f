"""Reference mode: FIFO and SJF exactly as the Helios/Lucid artifact simulates them.

A check of the simulator against published results, not a product policy. The artifact's
rules (see the Venus trace README):

- the queue is sorted (FIFO: by submit time; SJF: by trace duration, an oracle) with Python's
  stable sort, so ties keep arrival order, then trace order: the keys here are
  ``index`` and ``(duration, index)``;
- jobs are placed in that order, stopping at the first that does not fit (head-of-line
  blocking, no backfill, no preemption);
- placement is "consolidate" (:func:`consolidate`).

The artifact steps a 1-second clock; the engine jumps between submissions and completions
instead, which gives the same result because nothing changes on the ticks in between.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from gpuyard.simulator.policy import Decision, PolicyContext, SimulationError, Slot, StartJob, View

__all__ = ["ReferencePolicy", "consolidate"]


def consolidate(free: Sequence[int], capacity: Sequence[int], gpus: int) -> tuple[Slot, ...] | None:
    """The artifact's "consolidate" placement over free GPUs per node (node order = index).

    - The partition must have ``gpus`` free GPUs in all.
    - Up to a node's size: best fit, the node with the fewest free GPUs that still fit (ties:
      the lowest index).
    - Larger jobs (gangs, on nodes of one size ``G``): ``gpus // G`` completely free nodes,
      the lowest indices first; a remainder goes on the next node in order of free GPUs,
      descending (another free node if there is one), and must fit there.
    """
    if sum(free) < gpus:
        return None
    if gpus <= max(capacity):
        return _best_fit(free, gpus)
    return _gang(free, capacity, gpus)


def _best_fit(free: Sequence[int], gpus: int) -> tuple[Slot, ...] | None:
    best = -1
    for i, f in enumerate(free):
        if f >= gpus and (best < 0 or f < free[best]):
            best = i
    return None if best < 0 else (Slot(best, gpus),)


def _gang(free: Sequence[int], capacity: Sequence[int], gpus: int) -> tuple[Slot, ...] | None:
    size = capacity[0]
    if any(c != size for c in capacity):
        raise SimulationError(
            f"the reference placement of a {gpus}-GPU gang needs nodes of one size "
            f"(this partition has sizes {sorted(set(capacity))})"
        )
    whole, rest = divmod(gpus, size)
    full = [i for i, f in enumerate(free) if f == size]
    if len(full) < whole:
        return None
    slots = [Slot(i, size) for i in full[:whole]]
    if rest == 0:
        return tuple(slots)
    if len(full) > whole:
        return (*slots, Slot(full[whole], rest))
    # The remainder goes on the node with the most free GPUs (ties: lowest index), or nowhere.
    others = [i for i, f in enumerate(free) if 0 < f < size]
    node = max(others, key=lambda i: (free[i], -i), default=-1)
    if node < 0 or free[node] < rest:
        return None
    return (*slots, Slot(node, rest))


class ReferencePolicy:
    """``order``: ``"fifo"`` or ``"sjf"`` (SJF needs the oracle durations)."""

    def __init__(self, context: PolicyContext, order: str) -> None:
        if order not in ("fifo", "sjf"):
            raise SimulationError(f"unknown reference order {order!r}")
        if order == "sjf" and context.durations is None:
            raise SimulationError("reference SJF needs the trace durations (an oracle policy)")
        self._durations = context.durations
        self._sjf = order == "sjf"
        self._capacity = [n.gpus for n in context.partition.nodes]
        self._queue: list[tuple[float, int]] = []
        """(sort key, job index), kept sorted."""

    def _key(self, index: int) -> float:
        if self._sjf and self._durations is not None:
            return self._durations[index]
        return float(index)

    def decide(self, view: View) -> Decision:
        for job in view.submitted:
            bisect.insort(self._queue, (self._key(job.index), job.index))
        free = list(view.free)
        starts: list[StartJob] = []
        for _, index in self._queue:
            job = view.pending[index]
            placement = consolidate(free, self._capacity, job.gpus)
            if placement is None:
                break
            for slot in placement:
                free[slot.node] -= slot.gpus
            starts.append(StartJob(index, placement))
        del self._queue[: len(starts)]
        return Decision(starts=starts)
