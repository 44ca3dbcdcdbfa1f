"""The store's tables. Times are UTC epoch seconds (float), the clock's unit everywhere."""

from __future__ import annotations

import threading
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from pydantic import ValidationError
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from gpuyard.models.accounts import TokenKind
from gpuyard.models.dataset import DatasetVisibility, VersionState
from gpuyard.models.image_catalogue import ImageScope, ImageVisibility
from gpuyard.models.job import JobSpec
from gpuyard.models.node import NodeState
from gpuyard.models.request import JobRequest
from gpuyard.models.resources import Resources
from gpuyard.models.states import JobState
from gpuyard.models.worker import WorkerRole, WorkerState

__all__ = [
    "REQUEST_COLUMNS",
    "Base",
    "EventRow",
    "FaultRow",
    "GroupRow",
    "ImageRow",
    "JobRow",
    "NodeImageRow",
    "NodeRow",
    "NodeUsageRow",
    "PoolRow",
    "QuotaRow",
    "SignalRow",
    "UserRow",
    "WorkerRow",
    "WorkerUsageRow",
    "request_columns",
    "request_from_columns",
]


E = TypeVar("E", bound=StrEnum)


class EnumText(TypeDecorator[E]):
    """A string enum stored as its value in a plain string column: rows read back as enum
    members, so code compares members, never strings. No database enum type, so adding a
    member needs no migration."""

    impl = String(16)
    cache_ok = True

    def __init__(self, enum: type[E]) -> None:
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class _SpecMemo:
    """Validated specs by job id and version, the most recent ``size`` of them: the controller
    reads the spec of a job it steps on every pass, each time from a fresh row, and validating
    one costs a hundred times what comparing it does. A hit is taken only when the stored
    value equals the one the model was made from, so two stores (tests run many in one
    process) or a spec written without a new version can never get another's model."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.found: dict[tuple[int, int], tuple[dict[str, Any], JobSpec]] = {}
        self.lock = threading.Lock()

    def get(self, job_id: int, version: int, spec: dict[str, Any]) -> JobSpec:
        key = (job_id, version)
        hit = self.found.get(key)
        if hit is not None and (hit[0] is spec or hit[0] == spec):
            return hit[1]
        model = JobSpec.model_validate(spec)
        with self.lock:
            while len(self.found) >= self.size:
                del self.found[next(iter(self.found))]  # the oldest
            self.found[key] = (spec, model)
        return model


_SPECS = _SpecMemo(4096)
_DEFAULT_GRACE: float = JobSpec.model_fields["graceful_shutdown"].default


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(64))
    state: Mapped[JobState] = mapped_column(EnumText(JobState))
    version: Mapped[int] = mapped_column(Integer, default=0)
    priority: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    placement: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """A secret of the current attempt, shared by its workers (e.g. MPI's remote launch)."""
    group_name: Mapped[str] = mapped_column(String(64), default="")
    """The owner's group when the job was submitted (quotas and the urgent limit count it)."""
    group_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    """The id of that group: what access for others is granted to. A group deleted and made
    again under the same name has a new id, so its members get nothing of the old one's jobs
    (ids are never reused)."""
    seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Queue position (the id at submission); kept across suspensions."""
    wait_code: Mapped[str | None] = mapped_column(String(16), nullable=True)
    """Why a queued job waits, as a code (quota, priority, reserved, resources, …)."""
    start_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When a queued job is expected to start, where its reservation says so."""
    suspend_deadline: Mapped[float | None] = mapped_column(Float, nullable=True)
    """While suspending: when its workers get SIGTERM unless they have exited."""
    last_checkpoint_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When a worker last reported a saved checkpoint (gpuyard.runtime)."""
    suspensions: Mapped[int] = mapped_column(Integer, default=0)
    attained: Mapped[float] = mapped_column(Float, default=0.0)
    """GPU-seconds of service in its earlier attempts (time-slicing ranks jobs by it)."""
    ran: Mapped[float] = mapped_column(Float, default=0.0)
    """Seconds its earlier attempts ran: from ``started_at`` to the end of their suspension,
    the span ``attained`` counts. Everything else since ``created_at`` it waited, so the
    time it has waited in all is ``now - created_at - ran`` while queued, and
    ``started_at - created_at - ran`` while it runs (a pool's ``age_halflife`` ages it by
    that). Kept where ``attained`` is: :func:`gpuyard.services.suspension.finish_suspension`."""
    listens: Mapped[bool] = mapped_column(Boolean, default=False)
    """Its runtime listens for the preemption notice: it saves a checkpoint when told."""
    prediction: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """While queued: when it should start and behind which jobs, as the controller last
    forecast it (:class:`gpuyard.models.Prediction` fields)."""

    # What it asks of the pool: its JobRequest (gpuyard.models.request), kept beside the spec
    # so that a scheduling pass reads plain columns instead of parsing every queued spec.
    nodes: Mapped[int] = mapped_column(Integer, default=1)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    mcpus: Mapped[int] = mapped_column(Integer, default=1000)
    memory: Mapped[int] = mapped_column(BigInteger, default=0)
    tasks: Mapped[int] = mapped_column(Integer, default=1)
    parameter_servers: Mapped[int] = mapped_column(Integer, default=0)
    alternatives: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    """[[gpus, mcpus, memory], ...] or None."""
    min_nodes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pool: Mapped[str | None] = mapped_column(String(64), nullable=True)
    node_names: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    driver: Mapped[str | None] = mapped_column(String(64), nullable=True)
    max_runtime: Mapped[float | None] = mapped_column(Float, nullable=True)
    exclude_nodes: Mapped[list[Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True, default=None
    )
    node_resources: Mapped[list[Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True, default=None
    )
    """A heterogeneous job's amounts node by node, ``[[gpus, mcpus, memory], ...]``; None:
    every node gets the job's ``gpus``, ``mcpus`` and ``memory``."""
    exclusive: Mapped[bool | None] = mapped_column(Boolean, nullable=True, default=None)
    """Whether its workers take their nodes whole; None: the default (whole nodes for a
    multi-node job; docs/scheduling.md, "Whole nodes")."""
    image_digest: Mapped[str | None] = mapped_column(String(71), nullable=True, default=None)
    """The digest its image was pinned to at submission (None: no image): the scheduler
    prefers nodes holding it (docs/images.md, "Placement")."""
    access: Mapped[str] = mapped_column(String(16), default="none")
    """What the other members of the owner's group may do with it: read-write, read-only or
    none (docs/accounts.md, 他人访问权限; gpuyard.models.access.Access)."""
    array_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    """The Slurm job array it belongs to (its first task's id; docs/slurm.md)."""
    array_throttle: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    """``%N`` of its array (``--array=0-9%2``): at most this many of the array's tasks hold
    resources at once (on every task of the array, the first included)."""
    begin_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """Slurm's ``--begin``: it does not start before this time."""
    limit_signal: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    """Seconds before its time limit that it gets the signal of its spec's ``slurm.signal``
    (a column, so the controller finds the jobs due without reading every running spec)."""
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    """Restarts after faults so far (against ``fault_tolerance.max_restarts``)."""
    check_failures: Mapped[int] = mapped_column(Integer, default=0)
    """Placements whose pre-flight check failed (against ``fault_tolerance.preflight_tries``)."""
    check_next: Mapped[bool] = mapped_column(Boolean, default=False)
    """The next attempt re-checks its nodes first (a fault pointed at a node)."""
    resume: Mapped[bool] = mapped_column(Boolean, default=True)
    """Whether the current attempt resumes from its checkpoint (``GPUYARD_RESUME``): false
    after a fault restart of a job whose recovery is ``restart``."""
    resume_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)
    """The checkpoint step its next attempts resume from (``GPUYARD_RESUME_STEP``), chosen by
    `gpuyard resume --from`; None: the newest (docs/checkpoints.md)."""
    hang_timeout: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """``fault_tolerance.hang_timeout`` (a column, so the loop finds the jobs to watch)."""
    perf_window: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """``fault_tolerance.performance.window`` (likewise)."""
    held: Mapped[bool] = mapped_column(Boolean, default=False)
    """Held: it waits until released, whatever else holds (``gpuyard hold/release``)."""
    depends: Mapped[list[Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True, default=None
    )
    """The spec's ``after``, as ``[[job id, when], …]``; None: it waits for no job."""
    held_until: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """While it is held (halting, held): when the hold ends, and the job with it."""
    hold_outcome: Mapped[JobState | None] = mapped_column(
        EnumText(JobState), nullable=True, default=None
    )
    """While it is held: how it ends if nobody starts it again (failed after a failure it was
    kept for, else stopped)."""

    def job_spec(self) -> JobSpec:
        """The stored spec as the model (not to be changed: it is shared), validated once per
        job version rather than on every read. Raises pydantic's ``ValidationError`` when the
        stored spec no longer passes today's rules (:meth:`loaded_spec` says None instead)."""
        return _SPECS.get(self.id, self.version, self.spec)

    def loaded_spec(self) -> JobSpec | None:
        """:meth:`job_spec`, or None when the stored spec no longer loads (stored by an older
        version, say): for the readers that must not fail on one such job."""
        try:
            return self.job_spec()
        except ValidationError:
            return None

    def grace(self) -> float:
        """Seconds its workers get between SIGTERM and SIGKILL: its spec's
        ``graceful_shutdown``, that field's default where the stored spec no longer loads."""
        spec = self.loaded_spec()
        return spec.graceful_shutdown if spec is not None else _DEFAULT_GRACE

    def ask(self) -> JobRequest:
        """The job's request, from its columns."""
        return request_from_columns(
            self.nodes,
            self.gpus,
            self.mcpus,
            self.memory,
            self.tasks,
            self.parameter_servers,
            self.alternatives,
            self.min_nodes,
            self.pool,
            self.node_names,
            self.driver,
            self.max_runtime,
            self.exclude_nodes,
            self.node_resources,
            self.exclusive,
        )

    __table_args__ = (
        Index("ix_jobs_state", "state"),
        Index("ix_jobs_owner", "owner"),
        Index("ix_jobs_name", "name"),
        Index("ix_jobs_array", "array_id"),
        Index("ix_jobs_finished_at", "finished_at"),
        # Ids are never reused (SQLite's AUTOINCREMENT; PostgreSQL's sequences never go
        # back): a new job with a deleted one's id would inherit what refers to it.
        {"sqlite_autoincrement": True},
    )


class EventRow(Base):
    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(96))
    from_state: Mapped[JobState | None] = mapped_column(EnumText(JobState), nullable=True)
    to_state: Mapped[JobState | None] = mapped_column(EnumText(JobState), nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    node: Mapped[str | None] = mapped_column(String(128), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (Index("ix_job_events_job", "job_id", "id"),)


class WorkerRow(Base):
    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(128))
    role: Mapped[WorkerRole] = mapped_column(EnumText(WorkerRole), default=WorkerRole.WORKER)
    task: Mapped[int] = mapped_column(Integer, default=0)
    primary: Mapped[bool] = mapped_column(Boolean, default=True)
    """Whether its exit decides the job (False for MPI targets and parameter servers)."""
    state: Mapped[WorkerState] = mapped_column(EnumText(WorkerState))
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    terminate_sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    notice_sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When the preemption notice reached it (docs/preemption.md)."""
    acknowledged_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    argv: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True, default=None)
    """An exec worker's command (``gpuyard exec run``); None: the job's own, or a check."""
    stop_grace: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """A person asked it to stop (``gpuyard exec stop`` / ``kill`` of a held job's exec and
    check workers): SIGTERM, then SIGKILL after this many seconds (0: SIGKILL at once)."""

    __table_args__ = (
        Index("ux_workers_job_attempt_rank", "job_id", "attempt", "rank", unique=True),
        Index("ix_workers_state", "state"),
    )


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    address: Mapped[str] = mapped_column(String(64))
    state: Mapped[NodeState] = mapped_column(EnumText(NodeState))
    executor: Mapped[str] = mapped_column(String(32))
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str] = mapped_column(String(128), default="")
    gpu_devices: Mapped[list[Any]] = mapped_column(JSON)
    cpus: Mapped[float] = mapped_column(Float)
    memory: Mapped[int] = mapped_column(BigInteger)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON)
    """What the executor reports (gpu model, zone of a virtual node, …)."""
    extra_labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """What an admin set (pool, zone, network, driver, …); wins over ``labels``."""
    updated_at: Mapped[float] = mapped_column(Float)
    cordon_reason: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)
    """Why it is cordoned (kept while it is gone, so it comes back cordoned); None: it is not."""
    cordoned_by: Mapped[str | None] = mapped_column(String(96), nullable=True, default=None)
    cordoned_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    health: Mapped[list[Any] | None] = mapped_column(
        JSON, nullable=True, default=None, deferred=True
    )
    """The latest inspection's findings (``Finding`` dicts, docs/node-health.md); None: not
    inspected yet. Deferred: the scheduler's snapshot never reads it."""
    inspected_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)

    def effective_labels(self) -> dict[str, str]:
        return {
            str(k): str(v) for k, v in {**(self.labels or {}), **(self.extra_labels or {})}.items()
        }


class GroupRow(Base):
    """A group. Jobs' access for others refers to its ``id``, which is never reused."""

    __tablename__ = "groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    urgent_limit: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Most running + queued jobs of the group at the urgent tier (None: no limit)."""
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = ({"sqlite_autoincrement": True},)


class UserRow(Base):
    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    group_name: Mapped[str | None] = mapped_column(
        ForeignKey("groups.name", ondelete="SET NULL"), nullable=True
    )
    role: Mapped[str] = mapped_column(String(16), default="user")
    """``user`` or ``admin``."""
    share: Mapped[float] = mapped_column(Float, default=1.0)
    """Fair-share weight inside a tier."""
    created_at: Mapped[float] = mapped_column(Float)
    os_user: Mapped[str | None] = mapped_column(String(32), nullable=True)
    """The OS account the user's jobs run as, where an admin mapped one (else the default
    mapping: gpuyard.launch.accounts)."""


class QuotaRow(Base):
    __tablename__ = "quotas"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(8))
    """``user`` or ``group``."""
    subject: Mapped[str] = mapped_column(String(64))
    tier: Mapped[str] = mapped_column(String(16))
    nodes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)

    __table_args__ = (Index("ux_quotas_subject_tier", "kind", "subject", "tier", unique=True),)


class PoolRow(Base):
    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    preemption: Mapped[str] = mapped_column(String(16), default="never")
    same_zone: Mapped[bool] = mapped_column(Boolean, default=False)
    notice: Mapped[float] = mapped_column(Float, default=60.0)
    grow_after: Mapped[float] = mapped_column(Float, default=60.0)
    slices: Mapped[list[Any]] = mapped_column(JSON, default=list)
    """Time-slicing bands in GPU-seconds (see ``PoolPolicy.slices``); empty: none."""
    age_halflife: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """Time-slicing's aging, seconds (``PoolPolicy.age_halflife``); None: off."""
    min_run: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """Time-slicing's quantum, seconds (``PoolPolicy.min_run``); None: off."""
    allreduce_floor: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """GB/s of all-reduce bus bandwidth below which the node check fails (None: no floor)."""
    idle_timeout: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    """Seconds an interactive job of the pool may sit idle (None: GPUYARD_IDLE_TIMEOUT)."""
    description: Mapped[str] = mapped_column(Text, default="")


REQUEST_COLUMNS = (
    JobRow.nodes,
    JobRow.gpus,
    JobRow.mcpus,
    JobRow.memory,
    JobRow.tasks,
    JobRow.parameter_servers,
    JobRow.alternatives,
    JobRow.min_nodes,
    JobRow.pool,
    JobRow.node_names,
    JobRow.driver,
    JobRow.max_runtime,
    JobRow.exclude_nodes,
    JobRow.node_resources,
    JobRow.exclusive,
)
"""The columns that hold a job's request, in :func:`request_from_columns`' order."""


def request_columns(ask: JobRequest) -> dict[str, Any]:
    """The values of the request columns for ``ask`` (to insert or update a job with)."""
    return {
        "nodes": ask.nodes,
        "gpus": ask.per_node.gpus,
        "mcpus": ask.per_node.mcpus,
        "memory": ask.per_node.memory,
        "tasks": ask.tasks,
        "parameter_servers": ask.parameter_servers,
        "alternatives": [[r.gpus, r.mcpus, r.memory] for r in ask.alternatives] or None,
        "min_nodes": ask.min_nodes,
        "pool": ask.pool,
        "node_names": sorted(ask.node_names) or None,
        "exclude_nodes": sorted(ask.exclude) or None,
        "node_resources": [[r.gpus, r.mcpus, r.memory] for r in ask.node_resources] or None,
        "driver": ask.driver,
        "max_runtime": ask.max_runtime,
        "exclusive": ask.exclusive,
    }


def request_from_columns(
    nodes: int,
    gpus: int,
    mcpus: int,
    memory: int,
    tasks: int,
    parameter_servers: int,
    alternatives: list[Any] | None,
    min_nodes: int | None,
    pool: str | None,
    node_names: list[Any] | None,
    driver: str | None,
    max_runtime: float | None,
    exclude_nodes: list[Any] | None = None,
    node_resources: list[Any] | None = None,
    exclusive: bool | None = None,
) -> JobRequest:
    """The request that :func:`request_columns` stored."""
    return JobRequest(
        nodes=nodes,
        per_node=Resources(gpus, mcpus, memory),
        tasks=tasks,
        parameter_servers=parameter_servers,
        alternatives=tuple(Resources(int(g), int(c), int(m)) for g, c, m in alternatives or ()),
        min_nodes=min_nodes,
        pool=pool,
        node_names=frozenset(str(n) for n in node_names or ()),
        driver=driver,
        max_runtime=max_runtime,
        exclude=frozenset(str(n) for n in exclude_nodes or ()),
        node_resources=tuple(Resources(int(g), int(c), int(m)) for g, c, m in node_resources or ()),
        exclusive=exclusive,
    )


class TokenRow(Base):
    """An API token: only its SHA-256 digest is stored (the token is 32 random bytes). A token
    made with another (its ``parent``) never outlives it and goes when it is revoked."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    user_name: Mapped[str] = mapped_column(ForeignKey("users.name", ondelete="CASCADE"))
    label: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"), nullable=True, default=None
    )
    """The token it was made with, if any: revoking that one revokes this one."""
    kind: Mapped[TokenKind] = mapped_column(EnumText(TokenKind), default=TokenKind.API)

    __table_args__ = (
        Index("ix_api_tokens_user", "user_name"),
        Index("ix_api_tokens_parent", "parent_id"),
        {"sqlite_autoincrement": True},
    )


class ImageRow(Base):
    """An image of the catalogue: a repository and tag of the pool's registry pushed through
    the pool, whose visibility says who may see and run it (models/image_catalogue.py)."""

    __tablename__ = "images"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repository: Mapped[str] = mapped_column(String(255))
    tag: Mapped[str] = mapped_column(String(128))
    digest: Mapped[str] = mapped_column(String(71))
    owner: Mapped[str] = mapped_column(String(64))
    group_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    """The id of the owner's group when it was pushed: who ``group`` visibility reaches."""
    visibility: Mapped[ImageVisibility] = mapped_column(EnumText(ImageVisibility))
    scope: Mapped[ImageScope] = mapped_column(EnumText(ImageScope))
    accelerator: Mapped[str] = mapped_column(String(64), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    size: Mapped[int] = mapped_column(BigInteger)
    pushed_by: Mapped[str] = mapped_column(String(64))
    pushed_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        Index("ux_images_name", "repository", "tag", unique=True),
        Index("ix_images_digest", "digest"),
        {"sqlite_autoincrement": True},
    )


class NodeImageRow(Base):
    """An image a node's cache was last known to hold: written when a pull for a job on
    the node completes. Only a preference of the scheduler reads it (docs/images.md,
    "Placement"), so a row the node's cache has since evicted costs nothing but that."""

    __tablename__ = "node_images"

    node: Mapped[str] = mapped_column(String(255), primary_key=True)
    digest: Mapped[str] = mapped_column(String(71), primary_key=True)
    at: Mapped[float] = mapped_column(Float)
    """When a job last had it on the node."""


class RegistryLoginRow(Base):
    """A user's login at a registry images are copied from, its password sealed with the
    pool's key (``secret_box.py``): read by that user's copies only (docs/images.md,
    "Registry logins")."""

    __tablename__ = "registry_logins"

    owner: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    username: Mapped[str] = mapped_column(String(256))
    ciphertext: Mapped[str] = mapped_column(Text)
    """The password, sealed together with the owner and host it is for."""
    saved_at: Mapped[float] = mapped_column(Float)


class DatasetRow(Base):
    """A dataset of the catalogue: its owner, name and visibility (models/dataset.py)."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(128))
    group_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    """The id of the owner's group when it was made: who ``group`` visibility reaches."""
    visibility: Mapped[DatasetVisibility] = mapped_column(EnumText(DatasetVisibility))
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        Index("ux_datasets_owner_name", "owner", "name", unique=True),
        Index("ix_datasets_name", "name"),
        {"sqlite_autoincrement": True},
    )


class DatasetVersionRow(Base):
    """One immutable version of a dataset: where its files are and their manifest."""

    __tablename__ = "dataset_versions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    state: Mapped[VersionState] = mapped_column(EnumText(VersionState))
    source: Mapped[str] = mapped_column(String(16))
    """``path`` (files left where they are, on shared storage) or ``upload`` (the pool's)."""
    path: Mapped[str] = mapped_column(Text)
    """The directory jobs mount: the given path, or where the upload was unpacked."""
    manifest: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    digest: Mapped[str] = mapped_column(String(71), default="")
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    files: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        Index("ux_dataset_versions", "dataset_id", "version", unique=True),
        {"sqlite_autoincrement": True},
    )


class DatasetFavouriteRow(Base):
    """A user's favourite dataset."""

    __tablename__ = "dataset_favourites"

    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    dataset_id: Mapped[int] = mapped_column(
        ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True
    )


class DatasetUploadRow(Base):
    """An upload session of a version: the bytes received so far (the archive's file holds
    them), so that an interrupted upload resumes where it stopped."""

    __tablename__ = "dataset_uploads"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id", ondelete="CASCADE"))
    owner: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    received: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[float] = mapped_column(Float)


class SettingRow(Base):
    """A pool-wide setting an admin changes at run time (e.g. ``sharing``)."""

    __tablename__ = "pool_settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON, nullable=True)


class AuditRow(Base):
    """Who did what to which job or setting, and when; kept when the job is deleted."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(96))
    action: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(String(160))
    detail: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (Index("ix_audit_time", "time"),)


class SignalRow(Base):
    """A signal a person sent to a running job (``scancel --signal``), until the controller
    has delivered it to the job's workers."""

    __tablename__ = "job_signals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    signal: Mapped[int] = mapped_column(Integer)
    steps: Mapped[bool] = mapped_column(Boolean)
    """To the job steps (srun) rather than the batch shell."""
    actor: Mapped[str] = mapped_column(String(96))
    created_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)

    __table_args__ = (Index("ix_job_signals_pending", "delivered_at"),)


class FaultRow(Base):
    """One entry of a job's fault-tolerance log (:class:`gpuyard.models.FaultEntry`)."""

    __tablename__ = "job_faults"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(16))
    cause: Mapped[str] = mapped_column(String(128))
    suspect: Mapped[str] = mapped_column(String(16))
    rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    node: Mapped[str | None] = mapped_column(String(128), nullable=True)
    evidence: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(Text, nullable=True)
    outcome_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    actor: Mapped[str | None] = mapped_column(String(96), nullable=True, default=None)
    """Who asked, for a usercall (``gpuyard exec``); None: the platform."""

    __table_args__ = (Index("ix_job_faults_job", "job_id"),)


class WorkerUsageRow(Base):
    """One point of a worker's usage series at one resolution (:mod:`gpuyard.models.usage`):
    the figures averaged over the bucket that starts at ``t``. Written by the controller's
    sampler; deleted with the worker, so with its job."""

    __tablename__ = "worker_usage"

    worker_id: Mapped[int] = mapped_column(
        ForeignKey("workers.id", ondelete="CASCADE"), primary_key=True
    )
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    """0 the samples, then 1-minute, 15-minute and 1-hour averages."""
    t: Mapped[float] = mapped_column(Float, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    """The worker's job (a job's series are read together)."""
    samples: Mapped[int] = mapped_column(Integer)
    cpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    """CPU cores."""
    memory: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    gpu_util: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_memory: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    __table_args__ = (
        Index("ix_worker_usage_job", "job_id", "level", "t"),
        Index("ix_worker_usage_level_t", "level", "t"),
    )


class NodeUsageRow(Base):
    """One point of a node's usage series, as :class:`WorkerUsageRow` for a worker."""

    __tablename__ = "node_usage"

    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    t: Mapped[float] = mapped_column(Float, primary_key=True)
    samples: Mapped[int] = mapped_column(Integer)
    cpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    memory: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    gpu_util: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_memory: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    __table_args__ = (Index("ix_node_usage_level_t", "level", "t"),)
