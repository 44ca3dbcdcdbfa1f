"""The scheduler's input: an immutable picture of the pool at one instant.

Plain frozen dataclasses, no pydantic and no ORM, so that building a snapshot of 10,000 nodes
and 100,000 jobs stays cheap and the same types serve the server, the trace simulator and queue
prediction. Everything a policy may look at is here, and nothing else: no durations the
scheduler could not know (the trace simulator relies on that).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpuyard.models.request import (
    ANYWHERE,
    DEFAULT_POOL,
    Constraint,
    Member,
    Request,
    Shape,
    choices,
)
from gpuyard.models.resources import Resources, millicpus
from gpuyard.models.waiting import WaitCode

__all__ = [
    "ANYWHERE",
    "COPY_RATE",
    "DEFAULT_POOL",
    "TIME_SHARING_AGE_HALFLIFE",
    "TIME_SHARING_MIN_RUN",
    "TIME_SHARING_SLICES",
    "Allocation",
    "Constraint",
    "DataNeed",
    "Limit",
    "Member",
    "NodeCapacity",
    "PendingJob",
    "PoolPolicy",
    "Preemption",
    "QuotaKey",
    "Request",
    "RunningJob",
    "Shape",
    "Snapshot",
]


COPY_RATE = 200e6
"""Bytes per second a node is taken to copy a dataset version to its fast storage at, until
the pool has measured its own copies (docs/datasets.md, "Data preparation"): about what a
node reads from shared storage over a 10 Gb/s link, or a local SSD copies, hashing included."""


@dataclass(frozen=True, slots=True)
class DataNeed:
    """A dataset version a job has copied to each of its nodes before its workers start
    (a mount with ``prepare``)."""

    version: int
    """The version's id in the catalogue."""
    size: int
    """Its bytes."""


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    name: str
    gpus: int
    cpus: float
    memory: int
    schedulable: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)
    """``pool``, ``zone``, ``driver``, ``gpu_model``, ``network``, and anything else."""
    images: frozenset[str] = frozenset()
    """Digests (``sha256:…``) of the job images its node cache holds: among nodes otherwise
    equally good, placement prefers those holding a job's image (docs/images.md)."""
    datasets: frozenset[int] = frozenset()
    """Ids of the dataset versions it holds a complete copy of (the executor's live view):
    among nodes otherwise equally good, placement prefers those holding more of a job's
    prepared data, and prediction counts the copy of the rest (docs/datasets.md)."""
    total: Resources = field(init=False, repr=False, compare=False, hash=False)
    """Its GPUs, CPUs and memory as one value."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", Resources.of(self.gpus, self.cpus, self.memory))

    @property
    def pool(self) -> str:
        return self.labels.get("pool") or DEFAULT_POOL

    @property
    def zone(self) -> str:
        return self.labels.get("zone", "")


class Preemption(StrEnum):
    """What a pool lets a higher tier do to lower running jobs."""

    NEVER = "never"
    """Higher tiers only block lower jobs that have not started (docs/scheduling.md)."""
    SUSPEND = "suspend"
    """Higher tiers suspend lower running jobs to take their place (docs/preemption.md)."""


TIME_SHARING_SLICES = (3600.0, 36000.0, 360000.0)
TIME_SHARING_AGE_HALFLIFE = 3 * 3600.0
"""Aging of a time-sharing pool: waiting 3 hours, or as long as the job has run if longer,
halves the service a job is ranked by."""
TIME_SHARING_MIN_RUN = 3600.0
"""Quantum of a time-sharing pool: an hour, doubled at each suspension (docs/scheduling.md
has the replays that chose both)."""
"""Bands at 1, 10 and 100 GPU-hours: what a time-sharing pool is advised to use. The trace
replay (docs/simulator.md) found decade-spaced slices from 30 minutes to 100 GPU-hours all
within 1 % of each other on real workloads; fewer bands did worse."""


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    name: str = DEFAULT_POOL
    preemption: Preemption = Preemption.NEVER
    same_zone: bool = False
    """Keep each multi-node gang inside one network zone (the ``zone`` label)."""
    notice: float = 60.0
    """Seconds a preempted job has to checkpoint and exit before SIGTERM."""
    grow_after: float = 60.0
    """Seconds an elastic job runs at one size before it may be grown."""
    slices: tuple[float, ...] = ()
    """Time-slicing inside a tier: GPU-seconds of service, ascending, that split each tier
    into bands. A job that has had less service goes first, and (with preemption
    ``suspend``) may suspend a job of its own tier that has had more, at a higher band. The
    idea of least-attained-service schedulers (Tiresias): without knowing how long jobs run,
    the short ones finish first."""

    age_halflife: float | None = None
    """Time-slicing's starvation guard: the service a waiting job is ranked by halves for
    every this many seconds it has waited (in all, since its submission), or for every
    stretch as long as it has run, if longer (:meth:`aged`). Without it
    least-attained-service lets the most served jobs wait behind every newer one, for days
    on a busy pool. None: no aging."""
    min_run: float | None = None
    """Time-slicing's quantum: a job of its own tier does not suspend a job before it has
    run this many seconds in its current attempt, doubled for each time it was suspended
    already (so no job is suspended over and over). None: no quantum."""

    def band(self, attained: float) -> int:
        """0 for the least served jobs; one more for each slice passed."""
        return bisect.bisect_right(self.slices, attained) if self.slices else 0

    def aged(self, attained: float, waited: float, gpus: int = 1) -> float:
        """The service a job is ranked by, having had ``attained`` GPU-seconds on ``gpus``
        GPUs and waited ``waited`` seconds: halved for every half-life waited, the half-life
        being ``age_halflife`` or the time the job has run, whichever is longer (so a long
        job is not brought back after a short wait: under overload every job waits long,
        and a fixed half-life would turn the queue into first-come first-served)."""
        if not self.age_halflife or waited <= 0 or attained <= 0:
            return attained
        half = max(self.age_halflife, attained / max(gpus, 1))
        return attained * float(0.5 ** (waited / half))

    def quantum(self, suspensions: int) -> float:
        """Seconds a job runs before its own tier may suspend it again."""
        return (self.min_run or 0.0) * 2.0 ** min(suspensions, 32)


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: int
    version: int
    priority: int
    """Tier rank; higher goes first."""
    seq: int
    """Original submission order; kept across suspensions."""
    owner: str
    request: Request
    """The first choice; for an elastic job, its largest size."""
    group: str = ""
    alternatives: tuple[Request, ...] = ()
    """Further per-node specs to try, in order, when ``request`` does not fit."""
    constraint: Constraint = ANYWHERE
    max_runtime: float | None = None
    """The user's limit: what backfill and prediction take as its run time."""
    predicted: float | None = None
    """Seconds it is predicted to run still (the duration predictor's median; None: no
    prediction). Backfill takes it as its run time when it has no max runtime."""
    min_nodes: int | None = None
    """Elastic: start with as few as this many nodes (``request`` has the most)."""
    attained: float = 0.0
    """GPU-seconds of service it has had (earlier attempts), for time-slicing."""
    queued_since: float | None = None
    """``now - queued_since`` is how long it has waited in all (its submission time plus the
    seconds it ran in earlier attempts): the pool's ``age_halflife`` ages it. None: not
    known (no aging)."""
    blocked: tuple[WaitCode, str] | None = None
    """Why it may not start whatever the room, as (wait code, reason): it is held, or waits
    for other jobs. It reserves nothing and holds no one back."""
    image: str = ""
    """The digest (``sha256:…``) of the image it runs in, pinned at submission; "" if none.
    Only a tie-break: nodes holding it are preferred among equally good ones."""
    datasets: tuple[DataNeed, ...] = ()
    """The dataset versions copied to each of its nodes before its workers start: a
    tie-break of placement, and time its prediction counts."""

    def choices(self) -> tuple[Request, ...]:
        """Every request the job may start with, in the order to try them."""
        return choices(self.request, self.alternatives, self.min_nodes)

    def smallest(self) -> Request:
        """The least it could start with (what quotas are checked against)."""
        if not self.alternatives and self.min_nodes is None:
            return self.request
        return min(self.choices(), key=lambda r: (r.nodes, r.gpus))


@dataclass(frozen=True, slots=True, init=False)
class Allocation:
    """One worker's use of one node."""

    node: str
    gpus: tuple[int, ...] = ()
    cpus: float = 0.0
    memory: int = 0
    exclusive: bool = False
    """The job holds the whole node, whatever it uses of it."""
    amount: Resources = field(init=False, repr=False, compare=False, hash=False)
    """What it takes of its node, unless exclusive (then the whole node)."""

    def __init__(
        self,
        node: str,
        gpus: tuple[int, ...] = (),
        cpus: float = 0.0,
        memory: int = 0,
        exclusive: bool = False,
    ) -> None:
        # Set the slots directly (see Resources.__init__): a cycle makes one per placed worker.
        _set_node(self, node)
        _set_gpus(self, gpus)
        _set_cpus(self, cpus)
        _set_memory(self, memory)
        _set_exclusive(self, exclusive)
        _set_amount(self, Resources(len(gpus), millicpus(cpus), memory))

    @classmethod
    def of_member(
        cls, node: str, gpus: tuple[int, ...], member: Member, *, exclusive: bool = False
    ) -> Allocation:
        """``member``'s allocation on ``node``, with these GPUs. The same as the constructor
        with the member's amounts, but its ``amount`` is the member's ``need`` (one value
        shared, not one more object per placed worker for the garbage collector to walk)."""
        if len(gpus) != member.gpus:
            return cls(node, gpus, member.cpus, member.memory, exclusive)
        alloc = object.__new__(cls)
        _set_node(alloc, node)
        _set_gpus(alloc, gpus)
        _set_cpus(alloc, member.cpus)
        _set_memory(alloc, member.memory)
        _set_exclusive(alloc, exclusive)
        _set_amount(alloc, member.need)
        return alloc


_set_node, _set_gpus, _set_cpus, _set_memory, _set_exclusive, _set_amount = (
    vars(Allocation)[name].__set__
    for name in ("node", "gpus", "cpus", "memory", "exclusive", "amount")
)


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: int
    priority: int
    owner: str
    allocations: tuple[Allocation, ...]
    group: str = ""
    version: int = 0
    started_at: float = 0.0
    max_runtime: float | None = None
    predicted_end: float | None = None
    """When the duration predictor expects it to end (None: no prediction)."""
    last_checkpoint: float | None = None
    """When it last saved a checkpoint (None: never; it would lose everything since start)."""
    suspending: bool = False
    """It is on its way out (told to suspend, stop or end): its resources are about to be free."""
    preemptible: bool = True
    """Whether it may be suspended for a higher tier (not while it is being launched)."""
    saves_on_notice: bool = False
    """Its processes listen for the preemption notice (``gpuyard.runtime``): it saves a
    checkpoint when told, so a suspension costs it no work."""
    min_nodes: int | None = None
    """Elastic: its range is min_nodes .. max_nodes."""
    max_nodes: int | None = None
    attained: float = 0.0
    """GPU-seconds of service before this attempt started."""
    queued: float = 0.0
    """Seconds it waited in all before this attempt started (the pool's ``age_halflife``)."""
    suspensions: int = 0
    """How many times it has been suspended (the pool's ``min_run`` doubles with each)."""
    gpus: int = field(init=False, repr=False, compare=False, hash=False)
    """GPUs of all its allocations (read for every running job by every cycle: computed
    once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", sum(len(a.gpus) for a in self.allocations))

    def attained_at(self, now: float) -> float:
        return self.attained + self.gpus * max(0.0, now - self.started_at)

    @property
    def expected_end(self) -> float | None:
        """When it will have ended at the latest, if it has a max runtime."""
        return None if self.max_runtime is None else self.started_at + self.max_runtime

    @property
    def likely_end(self) -> float | None:
        """When reservations take it to end: at its max runtime, else when it is predicted
        to (docs/scheduling.md#predicted-run-times); None if neither is known."""
        if self.max_runtime is not None:
            return self.started_at + self.max_runtime
        return self.predicted_end

    def lost_work(self, now: float) -> float:
        """Seconds of work a suspension now would throw away."""
        if self.saves_on_notice:
            return 0.0
        return max(0.0, now - max(self.started_at, self.last_checkpoint or self.started_at))

    @property
    def nodes(self) -> int:
        return len(self.allocations)


QuotaKey = tuple[str, str, int]
"""(``"user"`` or ``"group"``, its name, tier rank)."""


@dataclass(frozen=True, slots=True)
class Limit:
    """How much one user or group may hold at one tier; None is no limit."""

    nodes: int | None = None
    """Workers (each sits on one node, wholly or in part)."""
    gpus: int | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[NodeCapacity, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
    pools: Mapping[str, PoolPolicy] = field(default_factory=dict)
    """Policies by pool name; a pool not named here gets ``PoolPolicy(name)``."""
    quotas: Mapping[QuotaKey, Limit] = field(default_factory=dict)
    shares: Mapping[str, float] = field(default_factory=dict)
    """Fair-share weight per owner (default 1): usage is compared as usage / share."""
    copy_rate: float = COPY_RATE
    """Bytes per second a node copies a job's prepared data at (measured, or
    :data:`COPY_RATE`): what a prediction counts for the bytes its nodes lack."""

    def pool(self, name: str) -> PoolPolicy:
        return self.pools.get(name) or PoolPolicy(name)
