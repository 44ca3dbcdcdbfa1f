"""Which running jobs to suspend so that a waiting job fits, losing the least work.

Node by node: a node can take a whole-node member once every job on it is suspended (or
already on its way out); a partial member fits once enough of the jobs on the node are. The
cost of a node is the work its new victims would lose (time since their last checkpoint); each
member goes to the cheapest node, and a victim chosen once costs nothing again (suspending one
multi-node job frees all of its nodes). Jobs already suspending count as gone: if the job fits
once they have left, no new victim is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuyard.models.resources import Resources
from gpuyard.scheduler.placement import Ledger, NodeFree
from gpuyard.scheduler.snapshot import Allocation, Constraint, Member, Request, RunningJob

__all__ = ["VictimPlan", "choose_victims"]

Cost = tuple[float, float]
"""(work lost, minus service had): lower is cheaper."""


@dataclass(slots=True)
class VictimPlan:
    victims: list[RunningJob] = field(default_factory=list)
    """New jobs to suspend (empty: the job fits once the suspending ones have left)."""
    allocations: tuple[Allocation, ...] = ()
    """Where the job will go once they have."""
    waits_for: list[int] = field(default_factory=list)
    """Jobs already suspending whose room it needs."""


@dataclass(slots=True)
class _Scratch:
    ledger: Ledger
    holders: dict[str, list[RunningJob]]
    eligible: Callable[[RunningJob], bool]
    now: float
    gone: dict[int, RunningJob] = field(default_factory=dict)
    """Victims and suspending jobs: their allocations count as free."""
    planned: dict[str, list[Member]] = field(default_factory=dict)

    def cost(self, victims: list[RunningJob]) -> Cost:
        """What suspending ``victims`` costs: the work they would lose (time since their last
        checkpoint), then, between equals, the service they have had (the most served go
        first, as a least-attained-service scheduler would have it)."""
        return (
            sum(j.lost_work(self.now) for j in victims),
            -sum(j.attained_at(self.now) for j in victims),
        )

    def free(self, node: NodeFree) -> Resources:
        """What is free on ``node`` once the gone jobs have left and the planned members are
        on it."""
        room = node.free
        for job in self.holders.get(node.capacity.name, ()):
            if job.id in self.gone:
                for a in job.allocations:
                    if a.node == node.capacity.name:
                        room = _freed(node, a, room)
        for m in self.planned.get(node.capacity.name, ()):
            room -= m.need
        return room

    def whole_cost(self, node: NodeFree) -> tuple[Cost, list[RunningJob]] | None:
        if node.capacity.name in self.planned or node.holds:
            return None
        new = [j for j in self.holders.get(node.capacity.name, ()) if j.id not in self.gone]
        if not all(self.eligible(j) for j in new):
            return None
        return self.cost(new), new

    def partial_cost(self, node: NodeFree, member: Member) -> tuple[Cost, list[RunningJob]] | None:
        if node.holds or any(m.whole_node for m in self.planned.get(node.capacity.name, ())):
            return None
        room = self.free(node)
        chosen: list[RunningJob] = []
        others = sorted(
            (
                j
                for j in self.holders.get(node.capacity.name, ())
                if j.id not in self.gone and self.eligible(j)
            ),
            key=lambda j: (self.cost([j]), -j.started_at, j.id),
        )
        for job in others:
            if member.need.fits_in(room):
                break
            chosen.append(job)
            for a in job.allocations:
                if a.node == node.capacity.name:
                    room = _freed(node, a, room)
        if not member.need.fits_in(room):
            return None
        return self.cost(chosen), chosen


def _freed(node: NodeFree, a: Allocation, room: Resources) -> Resources:
    """``room`` on ``node`` once allocation ``a`` has left (all of it, if it was exclusive)."""
    return node.size if a.exclusive else room + a.amount


def choose_victims(
    ledger: Ledger,
    request: Request,
    constraint: Constraint,
    *,
    running: Sequence[RunningJob],
    eligible: Callable[[RunningJob], bool],
    same_zone: bool,
    now: float,
) -> VictimPlan | None:
    """The cheapest set of running jobs to suspend so that ``request`` fits; None if no set
    of eligible jobs would do."""
    candidates = ledger.candidates(constraint)
    names = {n.capacity.name for n in candidates}
    holders: dict[str, list[RunningJob]] = {}
    for job in running:
        for a in job.allocations:
            if a.node in names:
                holders.setdefault(a.node, []).append(job)
    scratch = _Scratch(ledger, holders, eligible, now)
    suspending = {j.id: j for j in running if j.suspending}
    scratch.gone.update(suspending)
    new: dict[int, RunningJob] = {}
    allocations: list[Allocation] = []
    whole = sorted((m for m in request.members if m.whole_node), key=lambda m: m.need, reverse=True)
    if whole:
        picked = _pick_whole(scratch, whole, candidates, same_zone)
        if picked is None:
            return None
        for member, node, victims in picked:
            for v in victims:
                new[v.id] = v
                scratch.gone[v.id] = v
            scratch.planned.setdefault(node.capacity.name, []).append(member)
            allocations.append(
                Allocation(
                    node.capacity.name, tuple(range(member.gpus)), member.cpus, member.memory, True
                )
            )
    for member in request.members:
        if member.whole_node:
            continue
        pick = _pick_partial(scratch, member, candidates)
        if pick is None:
            return None
        node, victims = pick
        for v in victims:
            new[v.id] = v
            scratch.gone[v.id] = v
        scratch.planned.setdefault(node.capacity.name, []).append(member)
        allocations.append(
            Allocation(node.capacity.name, tuple(range(member.gpus)), member.cpus, member.memory)
        )
    used = {a.node for a in allocations}
    waits_for = sorted(
        j.id for j in suspending.values() if any(a.node in used for a in j.allocations)
    )
    return VictimPlan(list(new.values()), tuple(allocations), waits_for)


def _pick_partial(
    scratch: _Scratch, member: Member, candidates: list[NodeFree]
) -> tuple[NodeFree, list[RunningJob]] | None:
    best: tuple[Cost, int, str] | None = None
    best_pick: tuple[NodeFree, list[RunningJob]] | None = None
    for node in candidates:
        found = scratch.partial_cost(node, member)
        if found is None:
            continue
        key = (found[0], len(found[1]), node.capacity.name)
        if best is None or key < best:
            best, best_pick = key, (node, found[1])
    return best_pick


def _pick_whole(
    scratch: _Scratch, whole: list[Member], candidates: list[NodeFree], same_zone: bool
) -> list[tuple[Member, NodeFree, list[RunningJob]]] | None:
    zones: dict[str, list[NodeFree]] = {}
    for node in candidates:
        zones.setdefault(node.capacity.zone if same_zone else "", []).append(node)
    best: tuple[Cost, list[tuple[Member, NodeFree, list[RunningJob]]]] | None = None
    for zone in sorted(zones):
        found = _pick_whole_in(scratch, whole, zones[zone])
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return None if best is None else best[1]


_Option = tuple[tuple[Cost, int, int, str], int, NodeFree, list[RunningJob]]
"""((cost, victims, size rank, name), position, node, victims): the key every member's
choice is the least of, then the node's place among the candidates (the first of equals)."""


def _pick_whole_in(
    scratch: _Scratch, whole: list[Member], nodes: list[NodeFree]
) -> tuple[Cost, list[tuple[Member, NodeFree, list[RunningJob]]]] | None:
    """Each member, largest first, on the node that costs least, among ``nodes``. A node's
    cost does not change while members are placed, except that a victim chosen for an earlier
    member costs nothing again: the nodes such a victim runs on are costed again, and the
    others are read once, cheapest first."""
    options: list[_Option] = []
    for position, node in enumerate(nodes):
        found = scratch.whole_cost(node)
        if found is not None:
            cost, victims = found
            options.append(
                ((cost, len(victims), node.rank, node.capacity.name), position, node, victims)
            )
    options.sort(key=lambda o: (o[0], o[1]))
    holding = scratch.ledger.topology.holding
    by_name = scratch.ledger.by_name
    of_node = {o[2].index: o for o in options}
    picked: list[tuple[Member, NodeFree, list[RunningJob]]] = []
    used: set[int] = set()
    total: Cost = (0.0, 0.0)
    chosen_ids: set[int] = set()
    touched: dict[int, _Option] = {}
    """The options on nodes that run a chosen victim (their cost is read again)."""
    for member in whole:
        fits = holding(member.need)
        best: tuple[tuple[Cost, int, int, str], int, Cost, NodeFree, list[RunningJob]] | None
        best = next(
            (
                (key, position, key[0], node, victims)
                for key, position, node, victims in options
                if node.index not in used and node.rank in fits and node.index not in touched
            ),
            None,
        )
        for static, position, node, victims in touched.values():
            if node.index in used or node.rank not in fits:
                continue
            cost = scratch.cost([j for j in victims if j.id not in chosen_ids])
            key = (cost, static[1], static[2], static[3])
            if best is None or (key, position) < (best[0], best[1]):
                best = (key, position, cost, node, victims)
        if best is None:
            return None
        _, _, cost, node, victims = best
        used.add(node.index)
        chosen_ids.update(v.id for v in victims)
        for victim in victims:
            for a in victim.allocations:
                other = by_name.get(a.node)
                if other is not None and other.index in of_node:
                    touched[other.index] = of_node[other.index]
        total = (total[0] + cost[0], total[1] + cost[1])
        picked.append((member, node, victims))
    return total, picked
