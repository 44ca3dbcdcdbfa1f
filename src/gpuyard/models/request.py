"""What a job asks of the pool, in the one shape that goes from the spec to the scheduler.

A :class:`JobRequest` is read off a validated :class:`~gpuyard.models.job.JobSpec` by
:func:`request_of`, stored as columns of the job's row, read back by the snapshot loader and
handed to the scheduler as :class:`Request` choices and a :class:`Constraint`. The service's
"could this ever fit" check, the scheduler and the launch plan all see the same workers
(:func:`members`: compute workers, then parameter servers, per sub-task), and "may this job
use that node" is :meth:`Constraint.allows`, written once.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuyard.models.job import JobMode, JobSpec, JobType, NodeResources
from gpuyard.models.resources import Resources
from gpuyard.spec_limits import DEFAULT_POOL

__all__ = [
    "ANYWHERE",
    "DEFAULT_POOL",
    "PS_MEMBER",
    "Constraint",
    "JobRequest",
    "Member",
    "Request",
    "Shape",
    "choices",
    "members",
    "request_of",
    "takes_whole_nodes",
]


ONE_CPU = Resources.of(cpus=1.0)
"""What a worker needs when its spec says nothing (the spec's defaults)."""


@dataclass(frozen=True, slots=True)
class Member:
    """What one worker of a job needs from the node it lands on."""

    gpus: int = 0
    cpus: float = 1.0
    memory: int = 0
    whole_node: bool = False
    """Take a whole free node (and hold it exclusively), as multi-node jobs do."""
    need: Resources = field(init=False, repr=False, compare=False, hash=False)
    """The same amounts as one value (the fit rule is :meth:`Resources.fits_in`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "need", Resources.of(self.gpus, self.cpus, self.memory))


def _need(member: Member) -> Resources:
    return member.need


PS_MEMBER = Member(gpus=0, cpus=1.0, memory=1 << 30)
"""A parameter server's fixed share, as in the reference (1核1G)."""


Shape = tuple[tuple[int, int, int, bool], ...]
"""A request's members as plain tuples (GPUs, millicores, bytes, whole node)."""

_SHAPE_IDS: dict[Shape, int] = {}
_shape_counter = itertools.count()


def _shape_id(shape: Shape) -> int:
    """A small int per distinct shape: the scheduler keys its per-cycle caches by shape many
    times per job, and hashing a gang's nested tuple every time would cost more than the
    lookups. Ids are never reused (the table is emptied if it grows large, which costs only
    cache misses), so equal ids always mean equal shapes."""
    found = _SHAPE_IDS.get(shape)
    if found is None:
        if len(_SHAPE_IDS) >= 100_000:
            _SHAPE_IDS.clear()
        found = _SHAPE_IDS[shape] = next(_shape_counter)
    return found


@dataclass(frozen=True, slots=True)
class Request:
    """Everything a job needs at once: one member per worker, placed all or nothing."""

    members: tuple[Member, ...]
    shape: Shape = field(init=False, repr=False, compare=False, hash=False)
    """The members as plain tuples: a cheap dictionary key for caches keyed by shape."""
    shape_id: int = field(init=False, repr=False, compare=False, hash=False)
    """Equal for requests of equal shape (see :func:`_shape_id`)."""
    gpus: int = field(init=False, repr=False, compare=False, hash=False)
    """GPUs of all members."""
    whole: tuple[Member, ...] = field(init=False, repr=False, compare=False, hash=False)
    """The members that take whole nodes, largest first (how a gang is placed)."""
    whole_alike: bool = field(init=False, repr=False, compare=False, hash=False)
    """Whether those members are all alike (the common gang)."""
    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        shape = tuple(
            (m.need.gpus, m.need.mcpus, m.need.memory, m.whole_node) for m in self.members
        )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "shape_id", _shape_id(shape))
        object.__setattr__(self, "gpus", sum(m.gpus for m in self.members))
        whole = tuple(sorted((m for m in self.members if m.whole_node), key=_need, reverse=True))
        object.__setattr__(self, "whole", whole)
        object.__setattr__(self, "whole_alike", len({m.need for m in whole}) <= 1)
        # A gang of 1,000 members keys caches: hash its shape once, not at every lookup.
        object.__setattr__(self, "_hash", hash(shape))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def uniform(cls, nodes: int = 1, gpus: int = 0, cpus: float = 1.0, memory: int = 0) -> Request:
        """``nodes`` identical workers; more than one means whole nodes."""
        return cls((Member(gpus, cpus, memory, whole_node=nodes > 1),) * nodes)

    @property
    def nodes(self) -> int:
        return len(self.members)


@dataclass(frozen=True, slots=True)
class Constraint:
    """Where a job may run. ``nodes`` and ``driver`` are mutually exclusive (docs/jobs.md);
    both apply inside the job's pool."""

    pool: str = DEFAULT_POOL
    nodes: frozenset[str] = frozenset()
    """Only these nodes (empty: any node of the pool)."""
    driver: str | None = None
    """Only nodes whose ``driver`` label is this version."""
    exclude: frozenset[str] = frozenset()
    """Never these nodes."""
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Constraints key the scheduler's caches, once per job per cycle: hash them once.
        object.__setattr__(self, "_hash", hash((self.pool, self.nodes, self.driver, self.exclude)))

    def __hash__(self) -> int:
        return self._hash

    def allows(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether a job with this constraint may use node ``name`` with ``labels``."""
        return (
            (labels.get("pool") or DEFAULT_POOL) == self.pool
            and (not self.nodes or name in self.nodes)
            and (self.driver is None or labels.get("driver") == self.driver)
            and name not in self.exclude
        )

    @property
    def narrowed(self) -> bool:
        """It names a pool, nodes, a driver or nodes to avoid (anything but the default pool
        as a whole)."""
        return (
            bool(self.nodes)
            or self.driver is not None
            or self.pool != DEFAULT_POOL
            or bool(self.exclude)
        )


ANYWHERE = Constraint()
"""Any node of the default pool."""


def members(
    *,
    tasks: int,
    nodes: int,
    per_node: Resources,
    parameter_servers: int,
    node_resources: tuple[Resources, ...] = (),
    exclusive: bool | None = None,
) -> tuple[Member, ...]:
    """Every worker of a job, in rank order: per (sub-)task its compute workers, then its
    parameter servers. ``node_resources`` (a heterogeneous job) gives each compute worker its
    own amounts instead of ``per_node``. Compute workers take whole nodes as
    :func:`takes_whole_nodes` says."""
    whole = takes_whole_nodes(nodes, exclusive)
    if node_resources:
        compute = tuple(Member(r.gpus, r.cpus, r.memory, whole_node=whole) for r in node_resources)
    else:
        compute = (Member(per_node.gpus, per_node.cpus, per_node.memory, whole_node=whole),) * nodes
    return (compute + (PS_MEMBER,) * parameter_servers) * tasks


def takes_whole_nodes(nodes: int, exclusive: bool | None) -> bool:
    """Whether a job's compute workers take their nodes whole: as ``exclusive`` says, and by
    default (None) when there is more than one (docs/scheduling.md, "Whole nodes")."""
    return nodes > 1 if exclusive is None else exclusive


@functools.lru_cache(maxsize=4096)
def _request(
    tasks: int,
    nodes: int,
    per_node: Resources,
    parameter_servers: int,
    node_resources: tuple[Resources, ...] = (),
    exclusive: bool | None = None,
) -> Request:
    # Requests are immutable, and a queue holds few distinct shapes: share one per shape.
    return Request(
        members(
            tasks=tasks,
            nodes=nodes,
            per_node=per_node,
            parameter_servers=parameter_servers,
            node_resources=node_resources,
            exclusive=exclusive,
        )
    )


def choices(
    request: Request,
    alternatives: tuple[Request, ...],
    min_nodes: int | None,
    exclusive: bool | None = None,
) -> tuple[Request, ...]:
    """Every request a job may start with, in the order to try them: its own, then its
    alternative specs; an elastic job's sizes from the largest down to ``min_nodes``."""
    if min_nodes is None or min_nodes >= request.nodes:
        return (request, *alternatives) if alternatives else (request,)
    member = request.members[0]
    return tuple(
        Request(
            (
                Member(
                    member.gpus,
                    member.cpus,
                    member.memory,
                    whole_node=takes_whole_nodes(n, exclusive),
                ),
            )
            * n
        )
        for n in range(request.nodes, min_nodes - 1, -1)
    )


@dataclass(frozen=True, slots=True)
class JobRequest:
    """Everything about a job that decides where and when it may run."""

    nodes: int = 1
    """Compute workers per (sub-)task; the most, for an elastic job."""
    per_node: Resources = ONE_CPU
    tasks: int = 1
    """Sub-tasks side by side (a batch job); 1 for a regular job."""
    parameter_servers: int = 0
    alternatives: tuple[Resources, ...] = ()
    """Further per-node resources to try, in order (docs/jobs.md, "The spec")."""
    min_nodes: int | None = None
    """Elastic: the fewest nodes it may start with."""
    pool: str | None = None
    node_names: frozenset[str] = frozenset()
    driver: str | None = None
    max_runtime: float | None = None
    """Seconds; what backfill and prediction take as its run time."""
    exclude: frozenset[str] = frozenset()
    """Nodes it must not run on."""
    node_resources: tuple[Resources, ...] = ()
    """A heterogeneous job's amounts, node by node (``nodes`` of them; ``per_node`` is the
    first's); empty: every node gets ``per_node``."""
    exclusive: bool | None = None
    """Whether its compute workers take whole nodes; None: :func:`takes_whole_nodes`'s
    default."""

    @property
    def request(self) -> Request:
        """The first choice (an elastic job's largest size)."""
        return _request(
            self.tasks,
            self.nodes,
            self.per_node,
            self.parameter_servers,
            self.node_resources,
            self.exclusive,
        )

    @property
    def alternative_requests(self) -> tuple[Request, ...]:
        return tuple(
            _request(self.tasks, self.nodes, r, self.parameter_servers, (), self.exclusive)
            for r in self.alternatives
        )

    def choices(self) -> tuple[Request, ...]:
        return choices(self.request, self.alternative_requests, self.min_nodes, self.exclusive)

    def constraint(self, node_pools: Mapping[str, str] | None = None) -> Constraint:
        """Where it may run. A job that names nodes runs in their pool, looked up in
        ``node_pools`` (node name -> pool)."""
        pool = self.pool or DEFAULT_POOL
        if self.node_names and node_pools:
            pool = next((node_pools[n] for n in sorted(self.node_names) if n in node_pools), pool)
        return Constraint(pool, self.node_names, self.driver, self.exclude)


def request_of(spec: JobSpec) -> JobRequest:
    """The request of a validated spec."""

    def resources(r: NodeResources) -> Resources:
        return Resources.of(r.gpus, r.cpus, r.memory)

    het = spec.slurm.het if spec.slurm is not None else []

    return JobRequest(
        nodes=spec.nodes,
        per_node=resources(spec.resources),
        tasks=len(spec.tasks) if spec.type is JobType.BATCH else 1,
        parameter_servers=spec.parameter_servers if spec.mode is JobMode.TENSORFLOW else 0,
        alternatives=tuple(resources(r) for r in spec.alternatives),
        min_nodes=spec.min_nodes,
        pool=spec.pool,
        node_names=frozenset(spec.node_names),
        driver=spec.driver_version,
        max_runtime=spec.max_runtime,
        exclude=frozenset(spec.exclude_nodes),
        node_resources=tuple(
            Resources.of(c.gpus, c.cpus, c.memory) for c in het for _ in range(c.nodes)
        ),
        exclusive=spec.exclusive,
    )
