"""What a submission is refused for before anything is stored: a tier the owner may not use,
node names or a pool that do not exist, a job that could never fit.

Checked against a view of the nodes and pools that is kept in memory and reloaded only when
they changed (:meth:`gpuyard.store.Store.generation` counts the writes of this process) or,
for writes made elsewhere, once it is :data:`MAX_AGE` seconds old. A submission then reads
nothing from the database unless it asks for a tier beyond the users' own; with 1,000 nodes,
loading every node row for each submission was most of what a submission cost.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import select

from gpuyard.clock import Clock
from gpuyard.errors import InvalidSpec
from gpuyard.models import JobSpec, NodeState
from gpuyard.models.request import DEFAULT_POOL, Constraint, Request, request_of
from gpuyard.scheduler.placement import Ledger
from gpuyard.scheduler.snapshot import NodeCapacity
from gpuyard.services.accounts import AccountService
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeRow, PoolRow

__all__ = ["Admission"]

MAX_AGE = 30.0
"""Seconds a view of the nodes and pools serves at most: writes by this process are seen at
once; this bounds how long one made by another process (a second server on the same
PostgreSQL) goes unseen."""
MAX_VERDICTS = 10_000
"""Request shapes a view remembers the verdict of (a client sending ever new shapes must not
grow it without end)."""
_TABLES = ("nodes", "pools")


@dataclass(frozen=True)
class _Node:
    name: str
    state: NodeState
    labels: Mapping[str, str]

    @property
    def pool(self) -> str:
        return self.labels.get("pool") or DEFAULT_POOL


@dataclass
class _View:
    """The nodes and pools as a submission's checks need them."""

    generation: tuple[int, ...]
    loaded_at: float
    nodes: dict[str, _Node]
    same_zone: dict[str, bool]
    """Declared pools, and whether each places a gang in one network zone."""
    ledger: Ledger
    """The ready nodes, empty (it remembers what could ever fit)."""
    verdicts: dict[object, str | None] = field(default_factory=dict)
    """Per (constraint, request shape): None, or why it can never run."""

    @property
    def pool_names(self) -> set[str]:
        return set(self.same_zone) | {n.pool for n in self.nodes.values()} | {DEFAULT_POOL}


class Admission:
    def __init__(self, store: Store, *, accounts: AccountService, clock: Clock) -> None:
        self.store = store
        self.accounts = accounts
        self.clock = clock
        self._view: _View | None = None
        self._lock = threading.Lock()

    def check(self, spec: JobSpec, owner: str) -> None:
        """Raise what a submission of ``spec`` by ``owner`` is refused for, before anything is
        written (the group's urgent limit is checked in the write itself)."""
        if spec.priority not in self.accounts.user_tiers:
            with self.store.read() as session:
                self.accounts.check_tier(session, owner, spec.priority)
        self.check_placement(spec)

    def check_placement(self, spec: JobSpec) -> None:
        """InvalidSpec unless the job's node names, pool and shape could ever be placed.

        Checked against the ready nodes the job may use. With no node registered at all (the
        pool is starting), or when all the job's nodes are cordoned for now, it is accepted
        and waits with a reason."""
        view = self._current()
        constraint = _constraint(view, spec)
        request = request_of(spec)
        key = (constraint, request.choices())
        try:
            verdict = view.verdicts[key]
        except KeyError:
            if len(view.verdicts) >= MAX_VERDICTS:
                view.verdicts.clear()
            verdict = view.verdicts[key] = _never(view, constraint, request.choices())
        if verdict is not None:
            raise InvalidSpec(verdict)

    def _current(self) -> _View:
        generation = self.store.generation(*_TABLES)
        now = self.clock.monotonic()
        view = self._view
        if view is not None and view.generation == generation and now - view.loaded_at < MAX_AGE:
            return view
        with self._lock:  # one reload for a burst of callers
            view = self._view
            if view is None or view.generation != generation or now - view.loaded_at >= MAX_AGE:
                view = self._view = self._load(generation, now)
        return view

    def _load(self, generation: tuple[int, ...], now: float) -> _View:
        with self.store.read() as session:
            rows = list(session.scalars(select(NodeRow).order_by(NodeRow.name)))
            same_zone = {
                name: bool(same)
                for name, same in session.execute(select(PoolRow.name, PoolRow.same_zone))
            }
        nodes = {r.name: _Node(r.name, r.state, r.effective_labels()) for r in rows}
        ready = [
            NodeCapacity(r.name, r.gpus, r.cpus, r.memory, labels=nodes[r.name].labels)
            for r in rows
            if r.state is NodeState.READY
        ]
        return _View(generation, now, nodes, same_zone, Ledger(ready, running=()))


def _never(view: _View, constraint: Constraint, choices: tuple[Request, ...]) -> str | None:
    """None if some choice of the request could ever be placed; else why none can."""
    present = [n for n in view.nodes.values() if n.state is not NodeState.GONE]
    if not present:
        return None
    usable = [n for n in present if constraint.allows(n.name, n.labels)]
    if not usable:
        return _no_nodes_for(constraint, present)
    if not any(n.state is NodeState.READY for n in usable):
        return None
    same_zone = view.same_zone.get(constraint.pool, False)
    reasons = []
    for choice in choices:
        never = view.ledger.could_ever_fit(choice, constraint, same_zone=same_zone)
        if never is None:
            return None
        reasons.append(never)
    topology = view.ledger.topology
    usable_now = [topology.nodes[i] for i in topology.candidates(constraint)]
    return (
        f"this job can never run in this pool: {'; '.join(dict.fromkeys(reasons))}. "
        "Ask for fewer GPUs, CPUs, memory or nodes (see `gpuyard nodes`)"
        f"{_local_hint(usable_now, choices)}."
    )


def _local_hint(nodes: Sequence[NodeCapacity], choices: tuple[Request, ...]) -> str:
    """Where the nodes are this machine's (the local executor's) and it is CPUs or memory that
    none has for a worker whose GPUs would fit: the `gpuyard up` flag that would give them
    more (a small machine split into virtual nodes gives each a core or so;
    docs/scheduling.md, "Virtual nodes"). Else nothing."""
    if not nodes or any(n.labels.get("executor") != "local" for n in nodes):
        return ""
    gpus = max(n.gpus for n in nodes)
    cpus = max(n.cpus for n in nodes)
    memory = max(n.memory for n in nodes)
    short = [m for c in choices for m in c.members if m.gpus <= gpus]
    flags = []
    need_cpus = max((m.cpus for m in short if m.cpus > cpus), default=None)
    if need_cpus is not None:
        flags.append(f"--cpus-per-node {need_cpus:g}")
    need_memory = max((m.memory for m in short if m.memory > memory), default=None)
    if need_memory is not None:
        flags.append(f"--memory-per-node {-(-need_memory // (1 << 30))}G")  # whole GiB, up
    if not flags:
        return ""
    return (
        f", or give this machine's nodes more: `gpuyard up {' '.join(flags)}` (nodes may "
        "offer more CPUs or memory than the host has, shared as the host's scheduler shares "
        "them)"
    )


def _constraint(view: _View, spec: JobSpec) -> Constraint:
    """Where the job may run, as the scheduler reads it; InvalidSpec for names that do not
    exist, and for node names in several pools."""
    unknown = [n for n in dict.fromkeys(spec.exclude_nodes) if n not in view.nodes]
    if unknown:
        raise InvalidSpec(
            f"exclude_nodes: there is no node {', '.join(unknown)} (see `gpuyard nodes`)"
        )
    constraint = _where(view, spec)
    if spec.exclude_nodes:
        return replace(constraint, exclude=frozenset(spec.exclude_nodes))
    return constraint


def _where(view: _View, spec: JobSpec) -> Constraint:
    nodes = view.nodes
    if spec.node_names:
        missing = [n for n in dict.fromkeys(spec.node_names) if n not in nodes]
        if missing:
            known = list(nodes)
            shown = ", ".join(known[:20]) + (", …" if len(known) > 20 else "")
            raise InvalidSpec(
                f"node_names: there is no node {', '.join(missing)} (nodes: "
                f"{shown or 'none yet'}; see `gpuyard nodes`)"
            )
        pools: dict[str, list[str]] = {}
        for name in dict.fromkeys(spec.node_names):
            pools.setdefault(nodes[name].pool, []).append(name)
        if len(pools) > 1:
            where = "; ".join(f"{', '.join(ns)} in pool {p}" for p, ns in sorted(pools.items()))
            raise InvalidSpec(
                f"node_names: a job's nodes must all be in one pool, and these are not "
                f"({where}); name nodes of one pool"
            )
        return Constraint(next(iter(pools)), frozenset(spec.node_names))
    if spec.pool:
        known_pools = view.pool_names
        if spec.pool not in known_pools:
            raise InvalidSpec(
                f"pool: there is no pool {spec.pool} (pools: {', '.join(sorted(known_pools))}; "
                "see `gpuyard pools`)"
            )
        return Constraint(spec.pool)
    return Constraint(DEFAULT_POOL, driver=spec.driver_version)


def _no_nodes_for(constraint: Constraint, nodes: list[_Node]) -> str:
    """Why no node matches, and what to do about it."""
    if constraint.nodes:
        return (
            f"node_names: {', '.join(sorted(constraint.nodes))} are gone (no executor presents "
            "them any more); name other nodes (see `gpuyard nodes`)"
        )
    if constraint.driver is not None:
        in_pool = Constraint(constraint.pool)
        drivers = sorted(
            {d for n in nodes if (d := n.labels.get("driver")) and in_pool.allows(n.name, n.labels)}
        )
        return (
            f"driver_version: no node of the {constraint.pool} pool has driver "
            f"{constraint.driver} (drivers: {', '.join(drivers) or 'none labelled'}); an admin "
            "labels nodes with `gpuyard label NODE driver=VERSION`"
        )
    if constraint.pool == DEFAULT_POOL:
        pools = sorted(Counter(n.pool for n in nodes))
        return (
            f"pool: every node is in a named pool ({', '.join(pools)}) and the default pool "
            "has none; name one with `pool` (--pool)"
        )
    return (
        f"pool: pool {constraint.pool} has no nodes yet; an admin adds some with `gpuyard "
        f"label NODE pool={constraint.pool}`"
    )
