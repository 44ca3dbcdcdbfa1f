"""Free resources per node, and gang placement that commits all or nothing.

A :class:`Ledger` starts from node capacities minus running allocations. :meth:`Ledger.place`
finds a placement for every member of a job without changing anything (members are placed on a
scratch overlay that is then discarded); :meth:`Ledger.commit` takes it. Members that need a
whole node get distinct free nodes, the smallest that fit; the others go where they fit best
(the fewest GPUs, then CPUs, then memory left over), which keeps large holes free for large jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from gpuyard.quantities import format_bytes
from gpuyard.scheduler.snapshot import Allocation, Member, NodeCapacity, Request, RunningJob

__all__ = ["Ledger", "NodeFree"]


@dataclass(slots=True)
class NodeFree:
    capacity: NodeCapacity
    free_gpus: list[int]
    free_cpus: float
    free_memory: int
    holders: int = 0
    """How many allocations sit on the node."""

    def fits(self, member: Member) -> bool:
        if member.whole_node:
            return self.holders == 0 and _capacity_fits(self.capacity, member)
        return (
            len(self.free_gpus) >= member.gpus
            and self.free_cpus + 1e-9 >= member.cpus
            and self.free_memory >= member.memory
        )

    def take(self, alloc: Allocation) -> None:
        self.holders += 1
        if alloc.exclusive:
            self.free_gpus, self.free_cpus, self.free_memory = [], 0.0, 0
            return
        taken = set(alloc.gpus)
        self.free_gpus = [g for g in self.free_gpus if g not in taken]
        self.free_cpus -= alloc.cpus
        self.free_memory -= alloc.memory


def _capacity_fits(node: NodeCapacity, member: Member) -> bool:
    return (
        node.gpus >= member.gpus
        and node.cpus + 1e-9 >= member.cpus
        and node.memory >= member.memory
    )


class Ledger:
    def __init__(self, nodes: Iterable[NodeCapacity], running: Iterable[RunningJob]) -> None:
        self.nodes: dict[str, NodeFree] = {
            n.name: NodeFree(n, list(range(n.gpus)), n.cpus, n.memory) for n in nodes
        }
        self._empty: Ledger | None = None
        """The same nodes with nothing running, to tell "not now" from "never"."""
        for job in running:
            self.commit(job.allocations)

    def commit(self, allocations: Iterable[Allocation]) -> None:
        for alloc in allocations:
            free = self.nodes.get(alloc.node)
            if free is not None:  # a node that vanished may still host a job: nothing to count
                free.take(alloc)

    def place(self, request: Request) -> tuple[Allocation, ...] | None:
        """An allocation for every member (in member order), or None; changes nothing."""
        overlay: dict[str, NodeFree] = {}

        def view(name: str) -> NodeFree:
            if name not in overlay:
                base = self.nodes[name]
                overlay[name] = replace(base, free_gpus=list(base.free_gpus))
            return overlay[name]

        result: list[Allocation | None] = [None] * len(request.members)
        whole = [i for i, m in enumerate(request.members) if m.whole_node]
        if whole and not self._place_whole(request, whole, result, view):
            return None
        for i, member in enumerate(request.members):
            if member.whole_node:
                continue
            free = self._best_fit(member, view, overlay)
            if free is None:
                return None
            alloc = Allocation(
                node=free.capacity.name,
                gpus=tuple(free.free_gpus[: member.gpus]),
                cpus=member.cpus,
                memory=member.memory,
            )
            free.take(alloc)
            result[i] = alloc
        return tuple(a for a in result if a is not None)

    def _place_whole(
        self,
        request: Request,
        whole: list[int],
        result: list[Allocation | None],
        view: Callable[[str], NodeFree],
    ) -> bool:
        candidates = sorted(
            (f for f in self.nodes.values() if f.capacity.schedulable and f.holders == 0),
            key=lambda f: (f.capacity.gpus, f.capacity.cpus, f.capacity.memory, f.capacity.name),
        )
        used: set[str] = set()
        # Largest members first, each on the smallest free node that holds it.
        for i in sorted(whole, key=lambda i: _size(request.members[i]), reverse=True):
            member = request.members[i]
            node = next(
                (f for f in candidates if f.capacity.name not in used and f.fits(member)), None
            )
            if node is None:
                return False
            used.add(node.capacity.name)
            alloc = Allocation(
                node=node.capacity.name,
                gpus=tuple(range(member.gpus)),
                cpus=member.cpus,
                memory=member.memory,
                exclusive=True,
            )
            view(node.capacity.name).take(alloc)
            result[i] = alloc
        return True

    def _best_fit(
        self, member: Member, view: Callable[[str], NodeFree], overlay: dict[str, NodeFree]
    ) -> NodeFree | None:
        best: NodeFree | None = None
        best_key: tuple[int, float, int, str] | None = None
        for name, base in self.nodes.items():
            free = overlay.get(name, base)
            if not free.capacity.schedulable or not free.fits(member):
                continue
            key = (
                len(free.free_gpus) - member.gpus,
                free.free_cpus - member.cpus,
                free.free_memory - member.memory,
                name,
            )
            if best_key is None or key < best_key:
                best, best_key = free, key
        return None if best is None else view(best.capacity.name)

    def could_ever_fit(self, request: Request) -> str | None:
        """None if an empty pool could hold the job; otherwise why it never can."""
        usable = [f.capacity for f in self.nodes.values() if f.capacity.schedulable]
        if not usable:
            return "the pool has no schedulable nodes"
        if self._empty is None:
            self._empty = Ledger(usable, ())
        if self._empty.place(request) is not None:
            return None
        for member in request.members:
            if not any(_capacity_fits(n, member) for n in usable):
                return (
                    f"no node has {member.gpus} GPUs, {member.cpus:g} CPUs and "
                    f"{format_bytes(member.memory)} memory (largest: "
                    f"{max(n.gpus for n in usable)} GPUs, {max(n.cpus for n in usable):g} CPUs, "
                    f"{format_bytes(max(n.memory for n in usable))})"
                )
        whole = [m for m in request.members if m.whole_node]
        if len(whole) == request.nodes:
            largest = max(whole, key=_size)
            fitting = sum(1 for n in usable if _capacity_fits(n, largest))
            return f"it needs {len(whole)} nodes but only {fitting} nodes can hold its share"
        return f"its {request.nodes} workers do not fit in the pool together"


def _size(member: Member) -> tuple[int, float, int]:
    return (member.gpus, member.cpus, member.memory)
