"""Free resources per node, gang placement that commits all or nothing, and reservations.

A :class:`Ledger` starts from node capacities minus running allocations. :meth:`Ledger.place`
finds a placement for every member of a job without changing anything; :meth:`Ledger.commit`
takes it. Members that need a whole node get distinct idle nodes, the smallest that fit (all in
one zone when the pool says so); the others go where they fit best (the fewest GPUs left over),
which keeps large holes free for large jobs.

The ledger is indexed so that a cycle over 100,000 jobs on 10,000 nodes stays fast: per pool,
nodes are bucketed by their number of free GPUs, and idle nodes by (zone, size). Explicit node
lists and driver constraints are small by nature and are scanned.

**Reservations** (backfill). A job that must wait can *hold* resources on chosen nodes from the
time it is expected to start (:meth:`Ledger.reserve`). Every later job is placed around the
holds: it may use held resources only if it will have ended (its max runtime) before the hold
begins. Each node keeps the expected end of what runs on it, so the ledger can answer "when
could this member start here?" (:meth:`Ledger.earliest`).

What does not depend on what runs (each node's pool, zone and size class, the nodes a
constraint allows, whether a request could ever fit) is a :class:`Topology` of the nodes. A
ledger makes its own unless given one: queue prediction replays many cycles over the same nodes
and gives every cycle's ledger the same topology.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from gpuyard.models.resources import Resources
from gpuyard.quantities import counted, format_bytes
from gpuyard.scheduler.locality import NOTHING_PREFERRED, Preferred, preferred
from gpuyard.scheduler.snapshot import (
    ANYWHERE,
    Allocation,
    Constraint,
    DataNeed,
    Member,
    NodeCapacity,
    Request,
    RunningJob,
)

__all__ = ["INFINITY", "Hold", "Ledger", "NodeFree", "Topology"]

INFINITY = math.inf

SizeClass = Resources
"""A node's total: nodes of one size class are interchangeable for a whole-node member."""

Release = tuple[float, int, int, int]
"""(expected end, GPUs, millicores, memory) that an allocation frees: plain numbers, so that
sorting compares floats and ints, not Resources (whose order is a Python method), and so that
the garbage collector can stop tracking them (a tuple of numbers is untracked)."""

End = tuple[float, int, int, int, int]
"""(expected end, node index, GPUs, millicores, memory): a :data:`Release` on the timeline."""


@dataclass(frozen=True, slots=True)
class Hold:
    """Resources reserved on one node for a waiting job, from ``start`` on."""

    job_id: int
    start: float
    amount: Resources
    whole: bool


@dataclass(slots=True)
class NodeFree:
    index: int
    capacity: NodeCapacity
    free_gpus: tuple[int, ...]
    """Which of its GPUs are free (their count is ``free.gpus``)."""
    free_g: int
    free_c: int
    free_m: int
    """What is free, as GPUs, millicores and bytes (:attr:`free` as one value): a cycle
    changes them at every start and reads them at every placement."""
    pool: str
    zone: str
    rank: int
    """Its size class: the rank of its total among the distinct totals of the nodes, so that
    sizes compare as small ints (the order is that of :class:`Resources`)."""
    holders: int = 0
    """How many allocations sit on the node."""
    releases: list[Release] = field(default_factory=list)
    """(expected end, what it frees) of each allocation on the node, soonest first (see
    :data:`Release`)."""
    holds: tuple[Hold, ...] = ()
    idle_end: float = -INFINITY
    """When every allocation on the node will have ended (INFINITY if one has no end)."""

    @property
    def size(self) -> SizeClass:
        return self.capacity.total

    @property
    def free(self) -> Resources:
        return Resources(self.free_g, self.free_c, self.free_m)

    def fits_now(self, member: Member) -> bool:
        if member.whole_node:
            return self.holders == 0 and member.need.fits_in(self.capacity.total)
        return member.need.fits_in(self.free)

    def fits_around_holds(self, need: Resources, whole: bool, end: float) -> bool:
        """Whether ``need`` (a whole node if ``whole``), held until ``end``, leaves room for
        the holds it overlaps."""
        # A job that never ends (no max runtime) overlaps every hold, even one at an unknown time.
        applicable = [h for h in self.holds if h.start < end or end == INFINITY]
        if not applicable:
            return True
        if whole or any(h.whole for h in applicable):
            return False
        room = self.free_at(min(h.start for h in applicable))
        for h in self.holds:
            room -= h.amount
        return need.fits_in(room)

    def free_at(self, when: float) -> Resources:
        """What is free at ``when``, counting expected ends (not holds)."""
        gpus, mcpus, memory = self.free_g, self.free_c, self.free_m
        for end, g, c, m in self.releases:
            if end > when:
                break
            gpus, mcpus, memory = gpus + g, mcpus + c, memory + m
        return Resources(gpus, mcpus, memory)

    def take(self, alloc: Allocation, end: float) -> Release:
        """Take ``alloc`` until ``end``; returns what it took."""
        self.holders += 1
        if alloc.exclusive:
            taken = (end, self.free_g, self.free_c, self.free_m)
            self.free_gpus = ()
            self.free_g = self.free_c = self.free_m = 0
        else:
            gpus = alloc.gpus
            free_gpus = self.free_gpus
            if free_gpus[: len(gpus)] == gpus:
                # The usual case: a placement takes the first free GPUs.
                self.free_gpus = free_gpus[len(gpus) :]
            else:
                used = set(gpus)
                self.free_gpus = tuple(g for g in free_gpus if g not in used)
            amount = alloc.amount
            taken = (end, amount.gpus, amount.mcpus, amount.memory)
            self.free_g -= amount.gpus
            self.free_c -= amount.mcpus
            self.free_m -= amount.memory
        bisect.insort(self.releases, taken)
        self.idle_end = max(self.idle_end, end)
        return taken


def _size(member: Member) -> Resources:
    return member.need


class _PoolIndex:
    """The schedulable nodes of one pool, by free GPUs and, when idle, by (zone, size class)."""

    def __init__(self, max_gpus: int) -> None:
        self.by_free: list[dict[int, None]] = [{} for _ in range(max_gpus + 1)]
        self.idle: dict[tuple[str, int], dict[int, None]] = {}
        self.max_gpus = max_gpus

    def add(self, node: NodeFree) -> None:
        # A node without a free CPU can host no member (every member needs some): leaving it
        # out of the buckets keeps full nodes from being scanned again and again.
        if node.free_c > 0:
            self.by_free[node.free_g][node.index] = None
        if node.holders == 0:
            key = (node.zone, node.rank)
            group = self.idle.get(key)
            if group is None:
                group = self.idle[key] = {}
            group[node.index] = None

    def remove(self, node: NodeFree) -> None:
        self.by_free[node.free_g].pop(node.index, None)
        if node.holders == 0:
            group = self.idle.get((node.zone, node.rank))
            if group is not None:
                group.pop(node.index, None)


class Topology:
    """What a list of nodes offers apart from what runs on it: each node's pool, zone and size
    class, the nodes each constraint allows, and whether a request could ever fit them. It
    depends on nothing that changes during a replay, so every ledger of a replay shares one
    (its caches fill as constraints and shapes are asked about)."""

    def __init__(self, nodes: Iterable[NodeCapacity]) -> None:
        self.nodes = tuple(nodes)
        self.pools = [n.pool for n in self.nodes]
        self.zones = [n.zone for n in self.nodes]
        totals = {(t.gpus, t.mcpus, t.memory): t for t in (n.total for n in self.nodes)}
        order = sorted(totals)  # the order of Resources: GPUs, CPUs, memory
        rank = {amounts: i for i, amounts in enumerate(order)}
        self.sizes: list[SizeClass] = [totals[amounts] for amounts in order]
        """The distinct node totals, smallest first: a size rank's size."""
        self.ranks = [rank[(t.gpus, t.mcpus, t.memory)] for t in (n.total for n in self.nodes)]
        self.max_gpus: dict[str, int] = {}
        """Per pool, the most GPUs of a schedulable node."""
        for n, pool in zip(self.nodes, self.pools, strict=True):
            if n.schedulable:
                self.max_gpus[pool] = max(self.max_gpus.get(pool, 0), n.gpus)
        self.images: dict[str, frozenset[int]] = {}
        """Per image digest, the indices of the nodes whose cache holds it."""
        held: dict[str, set[int]] = {}
        for i, n in enumerate(self.nodes):
            for digest in n.images:
                held.setdefault(digest, set()).add(i)
        self.images = {digest: frozenset(found) for digest, found in held.items()}
        copies: dict[int, set[int]] = {}
        for i, n in enumerate(self.nodes):
            for version in n.datasets:
                copies.setdefault(version, set()).add(i)
        self.datasets: dict[int, frozenset[int]] = {
            version: frozenset(found) for version, found in copies.items()
        }
        """Per dataset version id, the indices of the nodes holding a copy."""
        self._preferred: dict[tuple[str, tuple[DataNeed, ...]], Preferred] = {}
        self._candidates: dict[Constraint, list[int]] = {}
        self._classes: dict[Constraint, dict[tuple[str, int], int]] = {}
        self._never: dict[tuple[Constraint, tuple[Member, ...], bool], str | None] = {}
        self._holding: dict[Resources, frozenset[int]] = {}
        self._empty: Ledger | None = None

    def preferred(self, image: str, datasets: tuple[DataNeed, ...]) -> Preferred:
        """The nodes that hold some of what a job with this image and prepared data needs,
        with their scores (:func:`gpuyard.scheduler.locality.preferred`); remembered."""
        if not image and not datasets:
            return NOTHING_PREFERRED
        key = (image, datasets)
        found = self._preferred.get(key)
        if found is None:
            data = ((self.datasets.get(d.version, _NO_NODES), d.size) for d in datasets)
            found = self._preferred[key] = preferred(self.images.get(image, _NO_NODES), data)
        return found

    def candidates(self, constraint: Constraint) -> list[int]:
        """The indices of the schedulable nodes a job with this constraint may use."""
        found = self._candidates.get(constraint)
        if found is None:
            found = self._candidates[constraint] = [
                i
                for i, n in enumerate(self.nodes)
                if n.schedulable and constraint.allows(n.name, n.labels)
            ]
        return found

    def holding(self, need: Resources) -> frozenset[int]:
        """The size ranks that could hold ``need`` on an empty node."""
        found = self._holding.get(need)
        if found is None:
            found = self._holding[need] = frozenset(
                r for r, size in enumerate(self.sizes) if need.fits_in(size)
            )
        return found

    def could_ever_fit(
        self, request: Request, constraint: Constraint, *, same_zone: bool
    ) -> str | None:
        """None if the nodes, all empty, could hold ``request``; otherwise why they never can.
        Remembered per constraint and members (the reason names the members' amounts)."""
        key = (constraint, request.members, same_zone)
        if key in self._never:
            return self._never[key]
        found = self._never[key] = self._could_ever_fit(request, constraint, same_zone)
        return found

    def _could_ever_fit(
        self, request: Request, constraint: Constraint, same_zone: bool
    ) -> str | None:
        usable = [self.nodes[i] for i in self.candidates(constraint)]
        if not usable:
            return _no_nodes(constraint)
        quick = self._fits_empty(request, constraint, same_zone)
        if quick:
            return None
        if self._empty is None:
            self._empty = Ledger(self.nodes, (), topology=self)
        if self._empty.place(request, constraint, same_zone=same_zone) is not None:
            return None
        if same_zone and self._empty.place(request, constraint) is not None:
            return (
                f"its {request.nodes} nodes must be in one network zone, and no zone"
                f"{_where(constraint)} has enough nodes that can hold it"
            )
        return _why_never(request, constraint, usable)

    def _fits_empty(self, request: Request, constraint: Constraint, same_zone: bool) -> bool | None:
        """Whether the empty nodes could hold ``request``, from counts of node sizes alone, for
        the common shapes (one member, or a gang of alike whole-node members); None when the
        counts cannot tell."""
        classes = self._classes.get(constraint)
        if classes is None:
            classes = {}
            for i in self.candidates(constraint):
                key = (self.zones[i], self.ranks[i])
                classes[key] = classes.get(key, 0) + 1
            self._classes[constraint] = classes
        sizes = self.sizes
        first = request.members[0]
        if len(request.members) == 1:
            return any(first.need.fits_in(sizes[rank]) for _, rank in classes)
        if not all(m == first for m in request.members) or not first.whole_node:
            return None
        per_zone: dict[str, int] = {}
        for (zone, rank), count in classes.items():
            if first.need.fits_in(sizes[rank]):
                zone_key = zone if same_zone else ""
                per_zone[zone_key] = per_zone.get(zone_key, 0) + count
        return any(count >= len(request.members) for count in per_zone.values())


class Ledger:
    def __init__(
        self,
        nodes: Iterable[NodeCapacity],
        running: Iterable[RunningJob] = (),
        now: float = 0.0,
        *,
        topology: Topology | None = None,
        unpredicted: Collection[str] = (),
    ) -> None:
        """``topology``: the nodes' :class:`Topology`, if the caller keeps one (it is used only
        if it was made from this very sequence of nodes). A running job ends at its
        :attr:`~RunningJob.likely_end` (its max runtime, else its predicted end), except in
        the ``unpredicted`` pools, where only a max runtime counts: the time-sliced ones,
        where room held on a prediction would drain nodes that the bands need no drain for
        (docs/scheduling.md#predicted-run-times)."""
        if topology is None or topology.nodes is not nodes:
            topology = Topology(nodes)
        self.topology = topology
        self.now = now
        pools, zones, ranks = topology.pools, topology.zones, topology.ranks
        self.nodes: list[NodeFree] = [
            NodeFree(
                i,
                n,
                _first(n.gpus),
                n.total.gpus,
                n.total.mcpus,
                n.total.memory,
                pools[i],
                zones[i],
                ranks[i],
                0,
                [],
            )
            for i, n in enumerate(topology.nodes)
        ]
        self.by_name = {n.capacity.name: n for n in self.nodes}
        self._candidates: dict[Constraint, list[NodeFree]] = {}
        self.held: dict[int, NodeFree] = {}
        """Nodes that carry holds."""
        self._ends: list[End] | None = None
        self._ends_added: list[End] = []
        """Expected ends committed since :meth:`_timeline` last sorted them in."""
        self._candidate_sets: dict[Constraint, frozenset[int]] = {}
        self._pools = {pool: _PoolIndex(g) for pool, g in topology.max_gpus.items()}
        by_name = self.by_name
        for job in running:
            end = job.likely_end
            if unpredicted and end is not None and job.max_runtime is None and job.allocations:
                node = by_name.get(job.allocations[0].node)
                if node is not None and node.pool in unpredicted:
                    end = None
            end = INFINITY if end is None else max(end, now)
            if job.suspending:
                end = now  # on its way out: its resources are the first to come back
            self._take_all(job.allocations, end)
        pool_indexes = self._pools
        for n in self.nodes:
            if n.capacity.schedulable:
                pool_indexes[n.pool].add(n)

    # -- changes --------------------------------------------------------------------------

    def _take_all(self, allocations: Iterable[Allocation], end: float) -> None:
        for alloc in allocations:
            node = self.by_name.get(alloc.node)
            if node is not None:  # a node that vanished may still host a job: nothing to count
                node.take(alloc, end)

    def commit(self, allocations: Iterable[Allocation], end: float = INFINITY) -> None:
        """Take ``allocations`` (from :meth:`place`) for a job that runs until ``end``."""
        timed = self._ends is not None and end != INFINITY
        for alloc in allocations:
            node = self.by_name.get(alloc.node)
            if node is None:
                continue
            index = self._pools.get(node.pool) if node.capacity.schedulable else None
            if index is not None:
                index.remove(node)
            _, g, c, m = node.take(alloc, end)
            if index is not None:
                index.add(node)
            if timed:
                self._ends_added.append((end, node.index, g, c, m))

    def reserve(self, job_id: int, start: float, allocations: Iterable[Allocation]) -> None:
        """Hold what ``allocations`` need from ``start`` on, for a job that waits."""
        for alloc in allocations:
            node = self.by_name[alloc.node]
            node.holds = (*node.holds, Hold(job_id, start, alloc.amount, alloc.exclusive))
            self.held[node.index] = node

    # -- placement now --------------------------------------------------------------------

    def candidates(self, constraint: Constraint) -> list[NodeFree]:
        """The schedulable nodes a job with this constraint may use."""
        found = self._candidates.get(constraint)
        if found is None:
            nodes = self.nodes
            found = [nodes[i] for i in self.topology.candidates(constraint)]
            self._candidates[constraint] = found
        return found

    def place(
        self,
        request: Request,
        constraint: Constraint = ANYWHERE,
        *,
        same_zone: bool = False,
        end: float = INFINITY,
        ignore_holds: bool = False,
        image: str = "",
        datasets: tuple[DataNeed, ...] = (),
    ) -> tuple[Allocation, ...] | None:
        """An allocation for every member (in member order), or None; changes nothing.

        ``end`` is when the job will have ended at the latest: it decides which holds the
        placement must leave room for (none with ``ignore_holds``). ``image``: the digest of
        the job's image; ``datasets``: its prepared data. Among nodes otherwise equally
        good, those holding more of them are chosen (:mod:`gpuyard.scheduler.locality`)."""
        held = self.topology.preferred(image, datasets)
        scan = bool(constraint.nodes) or constraint.driver is not None or bool(constraint.exclude)
        if not scan and constraint.pool not in self._pools:
            return None
        members = request.members
        if len(members) == 1 and not members[0].whole_node:  # the common job: one worker
            member = members[0]
            node = self._best_fit(member, constraint, scan, _NONE_TAKEN, end, ignore_holds, held)
            if node is None:
                return None
            first = tuple(node.free_gpus[: member.gpus])
            return (Allocation.of_member(node.capacity.name, first, member),)
        taken: dict[int, list[Allocation]] = {}
        result: list[Allocation | None] = [None] * len(members)
        whole = [i for i, m in enumerate(members) if m.whole_node]
        if whole:
            chosen = self._place_whole(
                request, whole, constraint, scan, same_zone, end, ignore_holds, held
            )
            if chosen is None:
                return None
            for i, whole_node in chosen.items():
                member = members[i]
                alloc = Allocation.of_member(
                    whole_node.capacity.name, _first(member.gpus), member, exclusive=True
                )
                result[i] = alloc
                taken[whole_node.index] = [alloc]
        for i, member in enumerate(members):
            if member.whole_node:
                continue
            node = self._best_fit(member, constraint, scan, taken, end, ignore_holds, held)
            if node is None:
                return None
            gpus, _ = _left(node, taken)
            alloc = Allocation.of_member(node.capacity.name, tuple(gpus[: member.gpus]), member)
            taken.setdefault(node.index, []).append(alloc)
            result[i] = alloc
        return tuple(a for a in result if a is not None)

    def _usable(self, node: NodeFree, member: Member, end: float, ignore_holds: bool) -> bool:
        return (
            ignore_holds
            or not node.holds
            or node.fits_around_holds(member.need, member.whole_node, end)
        )

    def _place_whole(
        self,
        request: Request,
        whole: list[int],
        constraint: Constraint,
        scan: bool,
        same_zone: bool,
        end: float,
        ignore_holds: bool,
        held: Preferred,
    ) -> dict[int, NodeFree] | None:
        groups = self._idle_groups(constraint, scan)
        if held:  # within each size class, the nodes holding more of what the job needs first
            groups = {k: _preferring(v, held) for k, v in groups.items()}
        if same_zone:
            zones = sorted({zone for zone, _ in groups})
            best: dict[int, NodeFree] | None = None
            best_key: tuple[int, str] | None = None
            for zone in zones:
                zone_groups = {k: v for k, v in groups.items() if k[0] == zone}
                chosen = self._whole_in(request, whole, zone_groups, end, ignore_holds)
                if chosen is None:
                    continue
                # The zone with the fewest idle nodes that still holds the gang: best fit.
                key = (sum(len(v) for v in zone_groups.values()), zone)
                if best_key is None or key < best_key:
                    best, best_key = chosen, key
            return best
        return self._whole_in(request, whole, groups, end, ignore_holds)

    def _idle_groups(
        self, constraint: Constraint, scan: bool
    ) -> dict[tuple[str, int], Collection[int]]:
        if not scan:
            return dict(self._pools[constraint.pool].idle)
        groups: dict[tuple[str, int], list[int]] = {}
        for n in self.candidates(constraint):
            if n.holders == 0:
                groups.setdefault((n.zone, n.rank), []).append(n.index)
        return dict(groups)

    def _whole_in(
        self,
        request: Request,
        whole: list[int],
        groups: dict[tuple[str, int], Collection[int]],
        end: float,
        ignore_holds: bool,
    ) -> dict[int, NodeFree] | None:
        # Size classes smallest first; largest members first, each on the smallest that holds it.
        classes = sorted(groups, key=lambda k: (k[1], k[0]))
        sizes = self.topology.sizes
        nodes = self.nodes
        first = request.members[whole[0]]
        if all(request.members[i] == first for i in whole):
            return self._whole_alike(first.need, whole, classes, groups, end, ignore_holds)
        used: set[int] = set()
        chosen: dict[int, NodeFree] = {}
        for i in sorted(whole, key=lambda i: _size(request.members[i]), reverse=True):
            member = request.members[i]
            node = None
            for key in classes:
                if not member.need.fits_in(sizes[key[1]]):
                    continue
                for idx in groups[key]:
                    candidate = nodes[idx]
                    if idx not in used and (
                        ignore_holds
                        or not candidate.holds
                        or candidate.fits_around_holds(member.need, True, end)
                    ):
                        node = candidate
                        break
                if node is not None:
                    break
            if node is None:
                return None
            used.add(node.index)
            chosen[i] = node
        return chosen

    def _whole_alike(
        self,
        need: Resources,
        whole: list[int],
        classes: list[tuple[str, int]],
        groups: dict[tuple[str, int], Collection[int]],
        end: float,
        ignore_holds: bool,
    ) -> dict[int, NodeFree] | None:
        """:meth:`_whole_in` for alike members (the common gang): each would take the next
        usable node of the same walk, so walk once."""
        sizes, nodes = self.topology.sizes, self.nodes
        picked: list[NodeFree] = []
        for key in classes:
            if not need.fits_in(sizes[key[1]]):
                continue
            for idx in groups[key]:
                candidate = nodes[idx]
                if (
                    ignore_holds
                    or not candidate.holds
                    or candidate.fits_around_holds(need, True, end)
                ):
                    picked.append(candidate)
                    if len(picked) == len(whole):
                        return dict(zip(whole, picked, strict=True))
        return None

    def _best_fit(
        self,
        member: Member,
        constraint: Constraint,
        scan: bool,
        taken: dict[int, list[Allocation]],
        end: float,
        ignore_holds: bool,
        held: Preferred = NOTHING_PREFERRED,
    ) -> NodeFree | None:
        found = self._first_fit(member, constraint, scan, taken, end, ignore_holds, held)
        if found is None or not held or scan or held.score(found.index) == held.top:
            return found
        return self._held_alike(found, member, constraint, taken, end, ignore_holds, held)

    def _held_alike(
        self,
        found: NodeFree,
        member: Member,
        constraint: Constraint,
        taken: dict[int, list[Allocation]],
        end: float,
        ignore_holds: bool,
        held: Preferred,
    ) -> NodeFree:
        """The node that holds the most of what the job needs (its image, its prepared data:
        ``held``) among those as good a fit as ``found`` (as many free GPUs left, in its
        pool), the first of the best; ``found`` if none holds more. Looks at the nodes in
        ``held`` or at those with as many free GPUs, whichever are fewer."""
        gpus = _left(found, taken)[1].gpus
        nodes = self.nodes
        bucket = self._pools[constraint.pool].by_free[found.free_g]
        if taken or len(held) < len(bucket):
            order: Iterable[int] = sorted(held)
        else:  # a popular image: walk the equally good nodes instead
            order = (idx for idx in bucket if idx in held)
        best, best_score = found, held.score(found.index)
        for idx in order:
            score = held.score(idx)
            if score <= best_score:
                continue
            node = nodes[idx]
            if (
                node.pool == constraint.pool
                and _left(node, taken)[1].gpus == gpus
                and self._fits_with(node, member, taken, end, ignore_holds)
            ):
                best, best_score = node, score
                if score == held.top:
                    break
        return best

    def _first_fit(
        self,
        member: Member,
        constraint: Constraint,
        scan: bool,
        taken: dict[int, list[Allocation]],
        end: float,
        ignore_holds: bool,
        held: Preferred,
    ) -> NodeFree | None:
        need = member.need
        if scan or need.mcpus <= 0:
            best: NodeFree | None = None
            best_key: tuple[Resources, tuple[int, int], str] | None = None
            for node in self.candidates(constraint):
                if not self._fits_with(node, member, taken, end, ignore_holds):
                    continue
                key = (_left(node, taken)[1] - need, held.rank(node.index), node.capacity.name)
                if best_key is None or key < best_key:
                    best, best_key = node, key
            return best
        index = self._pools[constraint.pool]
        nodes = self.nodes
        gpus, mcpus, memory = need.gpus, need.mcpus, need.memory
        for bucket in index.by_free[gpus:]:
            for idx in bucket:
                node = nodes[idx]
                if taken or node.holds:
                    if self._fits_with(node, member, taken, end, ignore_holds):
                        return node
                elif gpus <= node.free_g and mcpus <= node.free_c and memory <= node.free_m:
                    return node
        # Nodes this very placement already used sit in stale buckets: look at them too.
        for idx in taken:
            node = nodes[idx]
            if node.pool == constraint.pool and self._fits_with(
                node, member, taken, end, ignore_holds
            ):
                return node
        return None

    def _fits_with(
        self,
        node: NodeFree,
        member: Member,
        taken: dict[int, list[Allocation]],
        end: float,
        ignore_holds: bool,
    ) -> bool:
        if not node.capacity.schedulable:
            return False
        mine = taken.get(node.index)
        if mine and any(a.exclusive for a in mine):
            return False
        if not member.need.fits_in(_left(node, taken)[1]):
            return False
        if ignore_holds or not node.holds:
            return True
        need = member.need
        for a in mine or ():
            need += a.amount
        return node.fits_around_holds(need, member.whole_node, end)

    # -- the future -----------------------------------------------------------------------

    def earliest(
        self, request: Request, constraint: Constraint, *, same_zone: bool = False
    ) -> tuple[float, tuple[Allocation, ...]] | None:
        """When and where the job could start at the soonest, counting the expected ends of
        what runs and the holds already made (INFINITY: it waits for jobs without a max
        runtime); None if the holds leave it no room at all."""
        candidates = self.candidates(constraint)
        whole = request.whole
        start = self.now
        result: list[Allocation] = []
        used: dict[int, list[Member]] = {}
        if whole:
            picked = self._earliest_whole(request, candidates, same_zone)
            if picked is None:
                return None
            start = max(start, picked[0])
            for member, node in zip(whole, picked[1], strict=True):
                used[node.index] = [member]
                result.append(
                    Allocation(
                        node.capacity.name,
                        tuple(range(member.gpus)),
                        member.cpus,
                        member.memory,
                        True,
                    )
                )
        for member in request.members:
            if member.whole_node:
                continue
            found = self._earliest_partial(member, constraint, used)
            if found is None:
                return None
            when, node = found
            start = max(start, when)
            used.setdefault(node.index, []).append(member)
            result.append(
                Allocation(
                    node.capacity.name, tuple(range(member.gpus)), member.cpus, member.memory
                )
            )
        return start, tuple(result)

    def _earliest_partial(
        self, member: Member, constraint: Constraint, used: dict[int, list[Member]]
    ) -> tuple[float, NodeFree] | None:
        """The node where ``member`` fits soonest. Nodes with holds or planned members are
        looked at one by one; the others through the pool's timeline of expected ends, in
        time order, so the walk stops at the first node that has room."""
        allowed = self._candidate_set(constraint)
        best: tuple[float, int] | None = None
        best_node: NodeFree | None = None
        special = {i for i in (*self.held, *used) if i in allowed}
        for idx in special:
            node = self.nodes[idx]
            if any(m.whole_node for m in used.get(idx, ())):
                continue
            when = _when_fits(node, member, used.get(idx, []))
            if when is not None and (best is None or (when, idx) < best):
                best, best_node = (when, idx), node
        need = member.need
        acc: dict[int, list[int]] = {}
        for end, idx, g, c, m in self._timeline():
            if best is not None and end >= best[0]:
                break
            if idx not in allowed or idx in special:
                continue
            node = self.nodes[idx]
            room = acc.get(idx)
            if room is None:
                room = acc[idx] = [node.free_g, node.free_c, node.free_m]
            room[0] += g
            room[1] += c
            room[2] += m
            if need.gpus <= room[0] and need.mcpus <= room[1] and need.memory <= room[2]:
                best, best_node = (end, idx), node
                break
        if best_node is None:
            # Room only behind jobs without a max runtime: any node that could ever hold it.
            for node in self.candidates(constraint):
                if node.index not in special and _when_fits(node, member, []) is not None:
                    return INFINITY, node
            return None
        return (best[0] if best else INFINITY), best_node

    def _candidate_set(self, constraint: Constraint) -> frozenset[int]:
        found = self._candidate_sets.get(constraint)
        if found is None:
            found = frozenset(self.topology.candidates(constraint))
            self._candidate_sets[constraint] = found
        return found

    def _timeline(self) -> list[End]:
        """Every finite expected end on every node, soonest first (built on first use; the
        ends committed since are sorted in when it is next asked for)."""
        if self._ends is None:
            self._ends = sorted(
                (end, n.index, g, c, m)
                for n in self.nodes
                for end, g, c, m in n.releases
                if end != INFINITY
            )
            self._ends_added.clear()
        elif self._ends_added:
            self._ends += self._ends_added
            self._ends.sort()  # two sorted runs: one merge
            self._ends_added.clear()
        return self._ends

    def _earliest_whole(
        self, request: Request, candidates: list[NodeFree], same_zone: bool
    ) -> tuple[float, list[NodeFree]] | None:
        members = request.whole
        zones: dict[str, list[NodeFree]] = {}
        # A node with holds is already promised to a waiting job (_soonest_idle skips it).
        if same_zone:
            for node in candidates:
                if not node.holds:
                    zones.setdefault(node.zone, []).append(node)
        else:
            zones[""] = candidates
        best: tuple[float, list[NodeFree]] | None = None
        uniform = request.whole_alike
        for zone in sorted(zones):
            picked = self._soonest_idle(members, zones[zone], uniform)
            if picked is None:
                continue
            when = max(self.now, *(n.idle_end for n in picked))
            if best is None or when < best[0]:
                best = (when, picked)
        return best

    def _soonest_idle(
        self, members: Sequence[Member], nodes: list[NodeFree], uniform: bool
    ) -> list[NodeFree] | None:
        """Nodes for ``members`` (largest first) that are whole soonest, the smallest first;
        nodes with holds are left out."""
        now = self.now
        if uniform:  # the common gang: k alike members, so the k soonest fitting nodes
            holding = self.topology.holding(members[0].need)
            keys = [
                (n.idle_end if n.idle_end > now else now, n.rank, n.index)
                for n in nodes
                if n.rank in holding and not n.holds
            ]
            if len(keys) < len(members):
                return None
            return [self.nodes[key[2]] for key in heapq.nsmallest(len(members), keys)]
        ordered = sorted(
            (n for n in nodes if not n.holds), key=lambda n: (max(n.idle_end, now), n.rank, n.index)
        )
        picked: list[NodeFree] = []
        chosen: set[int] = set()
        for member in members:
            holding = self.topology.holding(member.need)
            fit = next((n for n in ordered if n.index not in chosen and n.rank in holding), None)
            if fit is None:
                return None
            picked.append(fit)
            chosen.add(fit.index)
        return picked

    # -- never ----------------------------------------------------------------------------

    def could_ever_fit(
        self, request: Request, constraint: Constraint = ANYWHERE, *, same_zone: bool = False
    ) -> str | None:
        """None if the job's nodes, all empty, could hold it; otherwise why they never can."""
        return self.topology.could_ever_fit(request, constraint, same_zone=same_zone)

    @property
    def holds(self) -> bool:
        """Whether any room is held for a waiting job."""
        return bool(self.held)


def _first(gpus: int) -> tuple[int, ...]:
    """GPUs 0 .. gpus-1 (what a whole node's allocation lists), shared for small counts."""
    return _FIRST[gpus] if gpus < len(_FIRST) else tuple(range(gpus))


_FIRST = [tuple(range(n)) for n in range(17)]

_NONE_TAKEN: dict[int, list[Allocation]] = {}
"""What a one-member placement has already taken: nothing (never written to)."""
_NO_NODES: frozenset[int] = frozenset()
"""The nodes holding an image or a dataset version no node holds."""


def _preferring(group: Collection[int], held: Preferred) -> list[int]:
    """``group``'s node indices, the better scores in ``held`` first, equals in the group's
    order."""
    return sorted(group, key=held.rank)


def _left(node: NodeFree, taken: dict[int, list[Allocation]]) -> tuple[Sequence[int], Resources]:
    """The GPUs and the room left on ``node`` once this placement's own members are on it."""
    mine = taken.get(node.index)
    if not mine:
        return node.free_gpus, node.free
    used = {g for a in mine for g in a.gpus}
    room = node.free
    for a in mine:
        room -= a.amount
    return [g for g in node.free_gpus if g not in used], room


def _when_fits(node: NodeFree, member: Member, also: list[Member]) -> float | None:
    """The soonest time ``member`` (beside ``also``, already planned there) fits on ``node``
    around its holds; None if never."""
    if any(h.whole for h in node.holds):
        return None
    need = member.need
    for planned in also:
        need += planned.need
    for h in node.holds:
        need += h.amount
    if not need.fits_in(node.size):
        return None
    gpus, mcpus, memory, when = node.free_g, node.free_c, node.free_m, -INFINITY
    for end, g, c, m in node.releases:
        if need.gpus <= gpus and need.mcpus <= mcpus and need.memory <= memory:
            break
        gpus, mcpus, memory, when = gpus + g, mcpus + c, memory + m, end
    fits = need.gpus <= gpus and need.mcpus <= mcpus and need.memory <= memory
    return when if fits else None


def _why_never(request: Request, constraint: Constraint, usable: list[NodeCapacity]) -> str:
    for member in request.members:
        if not any(member.need.fits_in(n.total) for n in usable):
            asked = _amounts(member.gpus, member.cpus, member.memory, omit_zero=True)
            sizes = _amounts(
                max(n.gpus for n in usable),
                max(n.cpus for n in usable),
                max(n.memory for n in usable),
                omit_zero=False,
            )
            return f"no node{_where(constraint)} has {_and(asked)} (largest: {', '.join(sizes)})"
    whole = [m for m in request.members if m.whole_node]
    if len(whole) == request.nodes:
        largest = max(whole, key=_size)
        fitting = sum(1 for n in usable if largest.need.fits_in(n.total))
        return (
            f"it needs {len(whole)} nodes but only {fitting} node(s){_where(constraint)} "
            "can hold its share"
        )
    return f"its {request.nodes} workers do not fit{_where(constraint)} together"


def _amounts(gpus: int, cpus: float, memory: int, *, omit_zero: bool) -> list[str]:
    """``["1 GPU", "2 CPUs", "8Gi memory"]``; with ``omit_zero``, what is not asked for is left
    out (a worker that asks for nothing still names its CPUs)."""
    parts = []
    if gpus or not omit_zero:
        parts.append(counted(gpus, "GPU"))
    if cpus or not omit_zero or not gpus:
        parts.append(counted(cpus, "CPU"))
    if memory or not omit_zero:
        parts.append(f"{format_bytes(memory)} memory")
    return parts


def _and(parts: list[str]) -> str:
    return " and ".join([", ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else parts[0]


def _no_nodes(constraint: Constraint) -> str:
    return f"the pool has no schedulable nodes{_where(constraint)}"


def _where(constraint: Constraint) -> str:
    parts = []
    if constraint.pool != "default":
        parts.append(f"pool {constraint.pool!r}")
    if constraint.nodes:
        parts.append("nodes " + ", ".join(sorted(constraint.nodes)))
    if constraint.driver is not None:
        parts.append(f"driver {constraint.driver}")
    where = (" in " + " / ".join(parts)) if parts else ""
    if constraint.exclude:
        where += " (not on " + ", ".join(sorted(constraint.exclude)) + ")"
    return where
