"""Free resources per node, and gang placement that commits all or nothing.

A :class:`Ledger` starts from node capacities minus running allocations. :meth:`Ledger.place`
finds a placement for a whole job without changing anything; :meth:`Ledger.commit` takes it.
Single-node jobs go to the node they fit best (the fewest GPUs, then CPUs, then memory left
over), which keeps large holes free for large jobs. Multi-node jobs take whole free nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuyard.scheduler.snapshot import Allocation, NodeCapacity, Request, RunningJob

__all__ = ["Ledger", "NodeFree"]


@dataclass(slots=True)
class NodeFree:
    capacity: NodeCapacity
    free_gpus: list[int]
    free_cpus: float
    free_memory: int
    holders: int = 0
    """How many allocations sit on the node."""

    def fits(self, request: Request) -> bool:
        if request.whole_nodes:
            return self.holders == 0 and _capacity_fits(self.capacity, request)
        return (
            len(self.free_gpus) >= request.gpus
            and self.free_cpus + 1e-9 >= request.cpus
            and self.free_memory >= request.memory
        )


def _capacity_fits(node: NodeCapacity, request: Request) -> bool:
    return (
        node.gpus >= request.gpus
        and node.cpus + 1e-9 >= request.cpus
        and node.memory >= request.memory
    )


class Ledger:
    def __init__(self, nodes: Iterable[NodeCapacity], running: Iterable[RunningJob]) -> None:
        self.nodes: dict[str, NodeFree] = {
            n.name: NodeFree(n, list(range(n.gpus)), n.cpus, n.memory) for n in nodes
        }
        for job in running:
            self.commit(job.allocations)

    def commit(self, allocations: Iterable[Allocation]) -> None:
        for alloc in allocations:
            free = self.nodes.get(alloc.node)
            if free is None:  # a node that vanished still hosts a job; nothing to account
                continue
            free.holders += 1
            if alloc.exclusive:
                free.free_gpus = []
                free.free_cpus = 0.0
                free.free_memory = 0
                continue
            taken = set(alloc.gpus)
            free.free_gpus = [g for g in free.free_gpus if g not in taken]
            free.free_cpus -= alloc.cpus
            free.free_memory -= alloc.memory

    def place(self, request: Request) -> tuple[Allocation, ...] | None:
        """A placement for every node of the job, or None; changes nothing."""
        if request.whole_nodes:
            return self._place_whole(request)
        best: NodeFree | None = None
        best_key: tuple[int, float, int, str] | None = None
        for free in self.nodes.values():
            if not free.capacity.schedulable or not free.fits(request):
                continue
            key = (
                len(free.free_gpus) - request.gpus,
                free.free_cpus - request.cpus,
                free.free_memory - request.memory,
                free.capacity.name,
            )
            if best_key is None or key < best_key:
                best, best_key = free, key
        if best is None:
            return None
        return (
            Allocation(
                node=best.capacity.name,
                gpus=tuple(best.free_gpus[: request.gpus]),
                cpus=request.cpus,
                memory=request.memory,
            ),
        )

    def _place_whole(self, request: Request) -> tuple[Allocation, ...] | None:
        candidates = sorted(
            (f for f in self.nodes.values() if f.capacity.schedulable and f.fits(request)),
            key=lambda f: (f.capacity.gpus, f.capacity.cpus, f.capacity.memory, f.capacity.name),
        )
        if len(candidates) < request.nodes:
            return None
        return tuple(
            Allocation(
                node=f.capacity.name,
                gpus=tuple(range(request.gpus)),
                cpus=request.cpus,
                memory=request.memory,
                exclusive=True,
            )
            for f in candidates[: request.nodes]
        )

    def could_ever_fit(self, request: Request) -> str | None:
        """None if an empty pool could hold the job; otherwise why it never can."""
        usable = [f.capacity for f in self.nodes.values() if f.capacity.schedulable]
        if not usable:
            return "the pool has no schedulable nodes"
        fitting = [n for n in usable if _capacity_fits(n, request)]
        if len(fitting) >= request.nodes:
            return None
        if not fitting:
            return (
                f"no node has {request.gpus} GPUs, {request.cpus:g} CPUs and "
                f"{request.memory} bytes of memory (largest: "
                f"{max(n.gpus for n in usable)} GPUs, {max(n.cpus for n in usable):g} CPUs, "
                f"{max(n.memory for n in usable)} bytes)"
            )
        return f"it needs {request.nodes} nodes but only {len(fitting)} nodes can hold its share"
