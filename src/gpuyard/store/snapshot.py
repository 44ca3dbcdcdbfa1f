"""Load the scheduler's snapshot from the store (the "load" of load -> decide -> apply).

Jobs are read as plain columns (their request is stored beside the spec, see
:func:`gpuyard.store.tables.request_columns`), never as specs: a pass may read 100,000 of them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gpuyard.models import JobState, NodeState, Priority
from gpuyard.models.dataprep import prepared
from gpuyard.models.job import Mount
from gpuyard.models.request import JobRequest
from gpuyard.models.states import HOLDING, PENDING
from gpuyard.models.waiting import WaitCode
from gpuyard.scheduler import (
    Allocation,
    Constraint,
    DataNeed,
    Limit,
    NodeCapacity,
    PendingJob,
    PoolPolicy,
    Preemption,
    RunningJob,
    Snapshot,
)
from gpuyard.store.tables import (
    REQUEST_COLUMNS,
    DatasetVersionRow,
    JobRow,
    NodeImageRow,
    NodeRow,
    PoolRow,
    QuotaRow,
    UserRow,
    request_from_columns,
)

__all__ = ["SnapshotLoader", "allocations_of", "hypothetical", "load_snapshot", "pool_policies"]

_PENDING = tuple(sorted(PENDING))
_PENDING_SET = frozenset(PENDING)
_REQUEST_WIDTH = len(REQUEST_COLUMNS)


def allocations_of(placement: list[dict[str, Any]] | None) -> tuple[Allocation, ...]:
    return tuple(
        Allocation(
            node=str(slot["node"]),
            gpus=tuple(int(g) for g in slot.get("gpus", ()) or ()),
            cpus=float(slot.get("cpus", 0.0)),
            memory=int(slot.get("memory", 0)),
            exclusive=bool(slot.get("exclusive", False)),
        )
        for slot in placement or []
    )


def pool_policies(session: Session) -> dict[str, PoolPolicy]:
    return {
        row.name: PoolPolicy(
            name=row.name,
            preemption=Preemption(row.preemption),
            same_zone=row.same_zone,
            notice=row.notice,
            grow_after=row.grow_after,
            slices=tuple(float(x) for x in row.slices or ()),
            age_halflife=row.age_halflife,
            min_run=row.min_run,
        )
        for row in session.scalars(select(PoolRow))
    }


class _Asks:
    """Requests and constraints are keys of the scheduler's caches, and a queue holds few
    distinct ones: build one object per distinct column tuple."""

    def __init__(self, node_pools: Mapping[str, str]) -> None:
        self.node_pools = node_pools
        self.known: dict[tuple[Any, ...], tuple[JobRequest, Constraint]] = {}
        self.constraints: dict[Constraint, Constraint] = {}

    def of(self, columns: tuple[Any, ...]) -> tuple[JobRequest, Constraint]:
        key = tuple(
            tuple(map(tuple, c)) if isinstance(c, list) else c  # JSON lists are not hashable
            for c in columns
        )
        found = self.known.get(key)
        if found is None:
            ask = request_from_columns(*columns)
            constraint = ask.constraint(self.node_pools)
            constraint = self.constraints.setdefault(constraint, constraint)
            found = self.known[key] = (ask, constraint)
        return found

    def of_row(self, sizes: Mapping[int, int], row: Any) -> PendingJob:
        """The queued job of a row of :data:`_PENDING_ROWS` (``sizes``: the bytes of the
        dataset versions it may prepare)."""
        return self.job(*self.of(tuple(row[:_REQUEST_WIDTH])), row, sizes)

    def job(
        self, ask: JobRequest, constraint: Constraint, row: Any, sizes: Mapping[int, int]
    ) -> PendingJob:
        return PendingJob(
            id=row.id,
            version=row.version,
            priority=Priority(row.priority).rank,
            seq=row.seq or row.id,
            owner=row.owner,
            request=ask.request,
            group=row.group_name or "",
            alternatives=ask.alternative_requests,
            constraint=constraint,
            max_runtime=ask.max_runtime,
            min_nodes=ask.min_nodes,
            attained=row.attained or 0.0,
            # Submitted at created_at, it has since run `ran` seconds and waited the rest: now -
            # queued_since is its wait in all, as PendingJob says (for a suspended job, its
            # wait before each earlier attempt plus the one since its last suspension).
            queued_since=row.created_at + (row.ran or 0.0),
            image=row.image_digest or "",
            datasets=tuple(DataNeed(v, sizes.get(v, 0)) for v in _prepared_versions(row)),
        )


def load_snapshot(
    session: Session, now: float, *, on_bad_row: Callable[[int, Exception], None] | None = None
) -> Snapshot:
    """The pool as the scheduler sees it. A job whose row cannot be read (a value no longer
    valid) is left out and reported to ``on_bad_row``, instead of failing every job's pass."""
    return SnapshotLoader().load(session, now, on_bad_row=on_bad_row)


class SnapshotLoader:
    """Loads snapshots again and again, reusing what did not change since the last one.

    A deep queue is read once: afterwards each load reads only the ids and versions of the
    queued jobs, and the full rows of those that are new or whose version moved (every change
    to a queued job that the scheduler reads bumps its version: a priority change, a
    suspension). The nodes (with the images they hold) are read again only when a write of
    this process touched the tables its ``generation`` names (:meth:`Store.generation`), or
    after :data:`MAX_AGE` seconds (a write made elsewhere); which of them are schedulable is
    read every time, after the jobs (see :meth:`_schedulable`). Running jobs, quotas, shares
    and pools are few: read every time.
    With 2,000 queued jobs, a pass that read them all was what spaced the passes out (they
    wait twice their own length) and left slots idle in a deep queue.
    """

    def __init__(self, generation: Callable[[], object] | None = None) -> None:
        self._generation = generation
        """What changes when the nodes or pools change (None: read them every time)."""
        self._nodes_key: tuple[object, float] | None = None
        self._nodes: tuple[NodeCapacity, ...] = ()
        self._asks = _Asks({})
        self._pending: dict[int, PendingJob] = {}

    def load(
        self,
        session: Session,
        now: float,
        *,
        on_bad_row: Callable[[int, Exception], None] | None = None,
        monotonic: float = 0.0,
    ) -> Snapshot:
        report = on_bad_row or _ignore
        nodes = self._load_nodes(session, monotonic)
        running = _each(_running, report, fallback=_holding_all, rows=session.execute(_RUNNING))
        pending = self._load_pending(session, report, now)
        return Snapshot(
            now=now,
            nodes=self._schedulable(session, nodes),
            pending=pending,
            running=running,
            pools=pool_policies(session),
            quotas={
                (q.kind, q.subject, Priority(q.tier).rank): Limit(nodes=q.nodes, gpus=q.gpus)
                for q in session.scalars(select(QuotaRow))
            },
            shares={
                name: share
                for name, share in session.execute(select(UserRow.name, UserRow.share))
                if share != 1.0
            },
        )

    def _load_nodes(self, session: Session, monotonic: float) -> tuple[NodeCapacity, ...]:
        if self._generation is not None and self._nodes_key is not None:
            generation, loaded_at = self._nodes_key
            if generation == self._generation() and monotonic - loaded_at < MAX_AGE:
                return self._nodes
        generation = self._generation() if self._generation is not None else None
        images = _node_images(session)
        self._nodes = tuple(
            NodeCapacity(
                name=row.name,
                gpus=row.gpus,
                cpus=row.cpus,
                memory=row.memory,
                schedulable=row.state is NodeState.READY,
                labels=row.effective_labels(),
                images=images.get(row.name, _NO_IMAGES),
            )
            for row in session.scalars(select(NodeRow).order_by(NodeRow.name))
        )
        self._nodes_key = (generation, monotonic)
        # A job that names nodes runs in their pool: its constraint depends on the nodes.
        self._asks = _Asks({n.name: n.pool for n in self._nodes})
        self._pending = {}
        return self._nodes

    def _schedulable(
        self, session: Session, nodes: tuple[NodeCapacity, ...]
    ) -> tuple[NodeCapacity, ...]:
        """``nodes`` with the schedulability the store holds now, read after the jobs.

        A job is requeued in the transaction that cordons the node its check blamed. The
        generation that tells the node cache it is stale moves only once that commit returned,
        while a pass in another thread may already read the requeued job: with cached nodes
        it placed the job straight back on the cordoned node. Read after the jobs (a statement
        of its own sees at least what they saw, also under READ COMMITTED), a node's state is
        never older than the queue it is scheduled with.
        """
        unschedulable = set(session.scalars(_UNSCHEDULABLE))
        if any(n.schedulable is (n.name in unschedulable) for n in nodes):
            nodes = tuple(replace(n, schedulable=n.name not in unschedulable) for n in nodes)
            self._nodes = nodes  # the cache, corrected
        return nodes

    def _load_pending(
        self, session: Session, report: Callable[[int, Exception], None], now: float
    ) -> tuple[PendingJob, ...]:
        versions = session.execute(_PENDING_VERSIONS).all()
        cached = self._pending
        stale = [job_id for job_id, version in versions if _version(cached, job_id) != version]
        fresh: dict[int, PendingJob] = {}
        asks = self._asks
        for chunk in range(0, len(stale), 500):  # bind-parameter limits
            rows = session.execute(
                _PENDING_ROWS.where(JobRow.id.in_(stale[chunk : chunk + 500]))
            ).all()
            sizes = _version_sizes(session, rows)
            for job in _each(functools.partial(asks.of_row, sizes), report, rows):
                fresh[job.id] = job
        self._pending = {}
        for job_id, version in versions:
            found = fresh.get(job_id) or cached.get(job_id)
            if found is not None and found.version == version:
                self._pending[job_id] = found
        # Whether a job is blocked is read afresh each time: a dependency ends without the
        # waiting job's version moving (the cache keeps the jobs unblocked).
        blocked = blocked_jobs(session, now)
        return tuple(
            replace(job, blocked=blocked[job.id]) if job.id in blocked else job
            for job in self._pending.values()
        )


MAX_AGE = 30.0
_UNSCHEDULABLE = select(NodeRow.name).where(NodeRow.state != NodeState.READY)
"""Seconds a loader's view of the nodes serves at most (writes by other processes)."""


_NO_IMAGES: frozenset[str] = frozenset()


def _node_images(session: Session) -> dict[str, frozenset[str]]:
    """The image digests each node was last known to hold (read with the nodes: a view up
    to :data:`MAX_AGE` old only delays a preference)."""
    held: dict[str, set[str]] = {}
    for node, digest in session.execute(select(NodeImageRow.node, NodeImageRow.digest)):
        held.setdefault(node, set()).add(digest)
    return {node: frozenset(digests) for node, digests in held.items()}


def _prepared_versions(row: Any) -> tuple[int, ...]:
    """The dataset versions a queued job has copied to its nodes first (its mounts with
    ``prepare``), each once."""
    if not row.data_mounts:
        return ()
    mounts = prepared(Mount.model_validate(m) for m in row.data_mounts)
    return tuple(dict.fromkeys(m.dataset_version for m in mounts if m.dataset_version))


def _version_sizes(session: Session, rows: Sequence[Any]) -> dict[int, int]:
    """The bytes of the dataset versions that ``rows`` prepare (a row that cannot be read
    is left to :func:`_each`)."""
    ids: set[int] = set()
    for row in rows:
        if row.data_mounts:
            try:
                ids.update(_prepared_versions(row))
            except (ValueError, TypeError):
                continue
    if not ids:
        return {}
    query = select(DatasetVersionRow.id, DatasetVersionRow.size)
    return dict(session.execute(query.where(DatasetVersionRow.id.in_(ids))).all())


def _version(cached: Mapping[int, PendingJob], job_id: int) -> int | None:
    job = cached.get(job_id)
    return None if job is None else job.version


_RUNNING = select(
    JobRow.id,
    JobRow.state,
    JobRow.priority,
    JobRow.owner,
    JobRow.placement,
    JobRow.group_name,
    JobRow.version,
    JobRow.started_at,
    JobRow.created_at,
    JobRow.max_runtime,
    JobRow.nodes,
    JobRow.min_nodes,
    JobRow.last_checkpoint_at,
    JobRow.attained,
    JobRow.ran,
    JobRow.suspensions,
    JobRow.listens,
).where(JobRow.state.in_(HOLDING))
_KEEPS_ROOM = frozenset(
    {
        JobState.RUNNING,
        JobState.STARTING,
        JobState.RECOVERING,
        JobState.HALTING,
        JobState.HELD,
        JobState.RESTARTING,
    }
)
_PENDING_VERSIONS = (
    select(JobRow.id, JobRow.version).where(JobRow.state.in_(_PENDING)).order_by(JobRow.id)
)
_PENDING_ROWS = select(
    *REQUEST_COLUMNS,
    JobRow.id,
    JobRow.version,
    JobRow.priority,
    JobRow.seq,
    JobRow.owner,
    JobRow.group_name,
    JobRow.attained,
    JobRow.created_at,
    JobRow.ran,
    JobRow.image_digest,
    # Only the dataset mounts of the spec (most jobs have none): what they prepare.
    JobRow.spec[("mounts", "datasets")].label("data_mounts"),
)


T = TypeVar("T")


def _each(
    build: Callable[[Any], T],
    report: Callable[[int, Exception], None],
    rows: Iterable[Any],
    fallback: Callable[[Any], T] | None = None,
) -> tuple[T, ...]:
    """``build`` of each row; a row that fails is reported, and left out or, with
    ``fallback``, replaced by what the fallback makes of it."""
    result = []
    for row in rows:
        try:
            result.append(build(row))
        except (ValueError, TypeError, KeyError) as exc:
            report(row.id, exc)
            if fallback is not None:
                result.append(fallback(row))
    return tuple(result)


def _ignore(_job_id: int, _exc: Exception) -> None:
    pass


def _holding_all(row: Any) -> RunningJob:
    """A running job whose row cannot be read: never leave it out (its room would be handed
    out twice); it holds every node it names, whole, until someone sorts it out."""
    return RunningJob(
        id=row.id,
        priority=max(p.rank for p in Priority),
        owner=str(row.owner),
        allocations=tuple(
            Allocation(str(slot["node"]), exclusive=True)
            for slot in row.placement or ()
            if isinstance(slot, dict) and "node" in slot
        ),
        preemptible=False,
    )


def _running(row: Any) -> RunningJob:
    state = row.state
    elastic = row.min_nodes is not None
    return RunningJob(
        id=row.id,
        priority=Priority(row.priority).rank,
        owner=row.owner,
        allocations=allocations_of(row.placement),
        group=row.group_name or "",
        version=row.version,
        started_at=row.started_at or row.created_at,
        max_runtime=row.max_runtime,
        last_checkpoint=row.last_checkpoint_at,
        # Draining, completing or suspending: its room comes back soon (a recovering job
        # keeps it: it restarts in place; so does a held one, until its hold ends).
        suspending=state not in _KEEPS_ROOM,
        # A job being launched is not a victim: let it start first.
        preemptible=state is JobState.RUNNING,
        min_nodes=row.min_nodes if elastic else None,
        max_nodes=row.nodes if elastic else None,
        attained=row.attained or 0.0,
        queued=_queued(row),
        suspensions=row.suspensions or 0,
        saves_on_notice=bool(row.listens),
    )


def _queued(row: Any) -> float:
    """Seconds a running job waited in all before its current attempt started: the time from
    its submission to that start that it did not run. Its launch (``starting``) counts as
    waiting, as it counts for no service. A job still being launched has no start of this
    attempt yet (its ``started_at`` is the last attempt's, or none): 0, which nothing reads
    (a job being launched is neither a victim nor ranked against one)."""
    if row.state is JobState.STARTING or row.started_at is None:
        return 0.0
    return max(0.0, float(row.started_at - row.created_at - (row.ran or 0.0)))


def hypothetical(
    snapshot: Snapshot, ask: JobRequest, *, priority: Priority, owner: str, group: str, seq: int
) -> PendingJob:
    """A job as it would be queued if submitted now (for ``submit --dry-run``): id -1."""
    asks = _Asks({n.name: n.pool for n in snapshot.nodes})
    row = _Hypothetical(
        owner=owner, group_name=group, seq=seq, priority=priority, created_at=snapshot.now
    )
    return asks.job(ask, ask.constraint(asks.node_pools), row, {})


class _Hypothetical:
    id = -1
    version = 0
    attained = 0.0
    ran = 0.0
    image_digest: str | None = None  # a prediction places it without the image preference
    data_mounts = None  # nor its dataset mounts, which are pinned only at submission

    def __init__(
        self, *, owner: str, group_name: str, seq: int, priority: Priority, created_at: float
    ) -> None:
        self.owner, self.group_name, self.seq, self.priority = owner, group_name, seq, priority
        self.created_at = created_at


_BLOCKABLE = select(
    JobRow.id, JobRow.held, JobRow.depends, JobRow.begin_at, JobRow.array_id, JobRow.array_throttle
).where(
    JobRow.state.in_(_PENDING),
    or_(
        JobRow.held.is_(True),
        JobRow.depends.is_not(None),
        JobRow.begin_at.is_not(None),
        JobRow.array_throttle.is_not(None),
    ),
)


def blocked_jobs(session: Session, now: float) -> dict[int, tuple[WaitCode, str]]:
    """The waiting jobs that may not start whatever the room, with (wait code, reason): held
    ones, those whose dependencies do not hold yet (or never will), those whose begin time
    (Slurm's ``--begin``) has not come, and the tasks of a throttled job array beyond its
    throttle."""
    rows = session.execute(_BLOCKABLE).all()
    if not rows:
        return {}
    wanted = sorted({int(d[0]) for row in rows for d in row.depends or ()})
    states: dict[int, JobState] = {}
    for chunk in range(0, len(wanted), 500):
        ids = wanted[chunk : chunk + 500]
        query = select(JobRow.id, JobRow.state).where(JobRow.id.in_(ids))
        states.update((job_id, state) for job_id, state in session.execute(query))
    blocked: dict[int, tuple[WaitCode, str]] = {}
    throttled: list[Any] = []
    for row in rows:
        job_id = row.id
        if row.held:
            blocked[job_id] = (WaitCode.HELD, f"held: `gpuyard release {job_id}` lets it start")
            continue
        waits = [why for d in row.depends or () if (why := _unmet(int(d[0]), str(d[1]), states))]
        if waits:
            never = [w for w in waits if w.startswith("can never")]
            blocked[job_id] = (WaitCode.DEPENDENCY, "; ".join(never or waits))
            continue
        if row.begin_at is not None and row.begin_at > now:
            when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(row.begin_at))
            blocked[job_id] = (WaitCode.BEGIN, f"may not start before {when} (--begin)")
            continue
        if row.array_throttle is not None:
            throttled.append(row)
    blocked.update(_beyond_throttle(session, throttled))
    return blocked


def _beyond_throttle(session: Session, rows: Sequence[Any]) -> dict[int, tuple[WaitCode, str]]:
    """The waiting tasks of throttled job arrays that may not start yet: an array whose
    throttle is N starts its waiting tasks in order while fewer than N of its tasks hold
    resources (Slurm's JobArrayTaskLimit)."""
    if not rows:
        return {}
    arrays: dict[int, list[Any]] = {}
    for row in rows:
        arrays.setdefault(row.array_id or row.id, []).append(row)
    holding: dict[int, int] = {}
    keys = sorted(arrays)
    array = func.coalesce(JobRow.array_id, JobRow.id)
    for chunk in range(0, len(keys), 500):
        query = (
            select(array, func.count())
            .where(
                JobRow.state.in_(HOLDING),
                JobRow.array_throttle.is_not(None),
                array.in_(keys[chunk : chunk + 500]),
            )
            .group_by(array)
        )
        holding.update((int(key), int(count)) for key, count in session.execute(query))
    blocked: dict[int, tuple[WaitCode, str]] = {}
    for key, tasks in arrays.items():
        throttle = min(int(t.array_throttle) for t in tasks)
        free = max(0, throttle - holding.get(key, 0))
        for task in sorted(tasks, key=lambda t: t.id)[free:]:
            blocked[task.id] = (
                WaitCode.ARRAY_LIMIT,
                f"{throttle} task(s) of job array {key} may run at once (--array ...%{throttle})",
            )
    return blocked


def _unmet(other: int, when: str, states: Mapping[int, JobState]) -> str:
    """Why the dependency on ``other`` does not hold ("" when it does). A job that was
    deleted counts as ended, its outcome unknown."""
    state = states.get(other)
    ended = state is None or state.is_terminal()
    if when == "started":
        return (
            ""
            if state is None or state not in _PENDING_SET
            else f"waiting for job {other} to start"
        )
    if when == "ended":
        return "" if ended else f"waiting for job {other} to end"
    outcome = "succeeded" if state is JobState.SUCCEEDED else "not succeeded"
    if not ended:
        return f"waiting for job {other} to {'succeed' if when == 'succeeded' else 'fail'}"
    if (when == "succeeded") == (outcome == "succeeded") and state is not None:
        return ""
    gone = "was deleted" if state is None else f"ended {state.value}"
    need = "succeed" if when == "succeeded" else "fail"
    return f"can never start: job {other} {gone}, and this job waits for it to {need}"
