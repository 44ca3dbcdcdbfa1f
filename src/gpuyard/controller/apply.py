"""Step 3 of a reconcile pass: load a snapshot, ``decide()``, and apply the decisions.

Starts are written with a transition guarded by the version the snapshot read (a decision made
on a stale read changes nothing), get a port per worker, and are handed to the launcher
(:mod:`gpuyard.controller.launcher`), which starts their workers beside the loop; all the
starts of a cycle go in a few short transactions. Suspensions begin the notice protocol
(:mod:`gpuyard.controller.suspension`); every waiting job's reason, code and expected start are
written when they change, in one statement.

The pass runs inside :func:`gpuyard.scheduler.frozen_heap`: the garbage collector does not walk
the snapshot, which holds no garbage, while ``decide()`` allocates.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, bindparam, or_, select, update
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.controller.data_locality import DataLocality
from gpuyard.controller.health import JobErrors
from gpuyard.errors import StaleWrite
from gpuyard.launch.check import CHECK_RANK_BASE, check_nodes
from gpuyard.launch.topology import seats
from gpuyard.models import JobSpec, JobState, Slot
from gpuyard.models.actor import Actor
from gpuyard.models.request import request_of
from gpuyard.models.states import HOLDING, PENDING
from gpuyard.models.worker import WorkerRole, WorkerState
from gpuyard.quantities import counted
from gpuyard.scheduler import Decisions, Snapshot, decide, frozen_heap
from gpuyard.scheduler.decide import Start
from gpuyard.scheduler.snapshot import Allocation
from gpuyard.services.suspension import begin_suspension
from gpuyard.services.transitions import transition
from gpuyard.store.durations import RunTimes
from gpuyard.store.engine import Store
from gpuyard.store.guarded import current
from gpuyard.store.snapshot import SnapshotLoader
from gpuyard.store.tables import JobRow, NodeRow, WorkerRow, request_columns

__all__ = ["PORT_RANGE", "SCHEDULER", "Applier", "NodeFacts", "launch_spec", "worker_rows"]

SCHEDULER = Actor.SCHEDULER
PORT_RANGE = (20000, 30000)
"""Ports handed to workers: below Linux's ephemeral range (32768 and up)."""


_PENDING_STATES = tuple(sorted(PENDING))
WAIT_REFRESH = 2.0
"""Seconds between rewrites of a waiting job's reworded reason (its code and expected start
are written as soon as they change)."""
START_CHUNK = 200
"""Starts written per transaction (a short hold of the write lock, however many there are)."""
_JOBS = cast("Table", JobRow.__table__)
_SET_WAIT = (
    update(_JOBS)
    # No IN: an expanding list cannot go into executemany.
    .where(_JOBS.c.id == bindparam("job"), or_(*(_JOBS.c.state == s for s in _PENDING_STATES)))
    .values(reason=bindparam("why"), wait_code=bindparam("code"), start_at=bindparam("at"))
)


class NodeFacts(NamedTuple):
    """What a start needs to know of a node: its address, its host (ports are per host) and
    its GPUs (what an exclusive slot holds)."""

    address: str
    host: str
    gpus: int = 0


class Applier:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        launch: Callable[[list[int]], None],
        mark_dirty: Callable[[], None],
        errors: JobErrors,
        give_up: Callable[[int], None],
        run_times: RunTimes | None = None,
        data: DataLocality | None = None,
    ) -> None:
        """``run_times``: the predictions to put on each snapshot (None: none); ``data``:
        the nodes' dataset copies and the copy rate to put on it (None: none)."""
        self.store = store
        self.run_times = run_times
        self.data = data
        self.clock = clock
        self.launch = launch
        """Launch the workers of these started jobs (the controller's launcher)."""
        self.mark_dirty = mark_dirty
        """Ask for another pass soon."""
        self.errors = errors
        """Each job's start is guarded: its failure is the job's, not the pass's."""
        self.give_up = give_up
        """Fail a job whose start keeps failing."""
        # node_images too: a node that now holds an image is preferred from the next pass.
        self.loader = SnapshotLoader(lambda: store.generation("nodes", "pools", "node_images"))
        self._port_cursor = secrets.randbelow(PORT_RANGE[1] - PORT_RANGE[0])
        self._written: dict[int, float] = {}
        """When each waiting job's reason was last written (monotonic)."""
        self._reasons: dict[int, tuple[str | None, str | None, float | None]] = {}
        """The waiting reason, code and expected start last written for each queued job, to
        write only changes."""

    def run(self) -> None:
        """Load a snapshot, decide, apply."""
        now = self.clock.now()
        with frozen_heap() as freeze:
            with self.store.read() as session:
                snapshot = self.loader.load(
                    session, now, on_bad_row=self._bad_row, monotonic=self.clock.monotonic()
                )
                if self.run_times is not None and snapshot.pending:
                    snapshot = self.run_times.apply(session, snapshot)
                if self.data is not None and snapshot.pending:
                    snapshot = self.data.apply(snapshot)
                nodes = {
                    name: NodeFacts(address, str((labels or {}).get("host", name)), gpus)
                    for name, address, labels, gpus in session.execute(
                        select(NodeRow.name, NodeRow.address, NodeRow.labels, NodeRow.gpus)
                    )
                }
                ports = self._ports_in_use(session, nodes) if snapshot.pending else {}
            if not snapshot.pending and not any(r.max_nodes for r in snapshot.running):
                self._reasons.clear()
                return
            snapshot = self._without_failing(snapshot)
            freeze()
            decisions = decide(snapshot)
            del snapshot
        self._preempt(decisions, now)
        started = self.start_all(decisions.starts, nodes, ports, now)
        if started:
            self.launch(started)
        self._record_waits(
            {w.job_id: (w.message, w.code.value, w.start_at) for w in decisions.waits.values()}
        )

    def start_all(
        self,
        starts: Sequence[Start],
        nodes: Mapping[str, NodeFacts],
        ports: dict[str, set[int]],
        now: float,
    ) -> list[int]:
        """Write the starts, a chunk per transaction; return the ids of the jobs started. Each
        start is guarded: its failure is that job's (its savepoint rolls back), and the room it
        took in this cycle is decided again soon, without it."""
        started: list[int] = []
        for chunk in range(0, len(starts), START_CHUNK):
            failed: list[tuple[int, Exception]] = []
            with self.store.write() as session:
                for start in starts[chunk : chunk + START_CHUNK]:
                    try:
                        with session.begin_nested():
                            if self.start(session, start, nodes, ports, now):
                                started.append(start.job_id)
                    except Exception as exc:
                        failed.append((start.job_id, exc))
            # Recorded once the transaction is over: recording writes an event of its own.
            for job_id, error in failed:
                self.errors.failed(job_id, "starting it", error)
                self.mark_dirty()
        for job_id in started:
            self.errors.succeeded(job_id)
        return started

    def _bad_row(self, job_id: int, exc: Exception) -> None:
        self.errors.failed(job_id, "reading it for scheduling", exc)

    def _without_failing(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot without queued jobs whose start keeps failing: they must not take room
        in a cycle only to fail again. Those that failed too often are given up on."""
        resting = []
        for job in snapshot.pending:
            if self.errors.exhausted(job.id):
                self.give_up(job.id)
                resting.append(job.id)
            elif self.errors.resting(job.id):
                resting.append(job.id)
        if not resting:
            return snapshot
        skip = set(resting)
        return replace(snapshot, pending=tuple(j for j in snapshot.pending if j.id not in skip))

    def _preempt(self, decisions: Decisions, now: float) -> None:
        """Begin the suspensions the scheduler asked for (to make room, or to grow)."""
        asks = [(p.job_id, p.version, p.reason) for p in decisions.preempts] + [
            (g.job_id, g.version, g.reason) for g in decisions.grows
        ]
        for job_id, version, why in asks:
            try:
                with self.store.write() as session:
                    row = current(session, job_id, version)
                    if row is None or row.state is not JobState.RUNNING:
                        continue  # it moved on since the snapshot: the next pass decides again
                    begin_suspension(session, row, actor=SCHEDULER, why=why, now=now)
            except StaleWrite:
                continue
            self.mark_dirty()

    def _slot(self, a: Allocation, facts: NodeFacts | None, ports: dict[str, set[int]]) -> Slot:
        """What one allocation is stored as; an exclusive one records the GPUs it holds (all of
        its node's), so views show what was given (:mod:`gpuyard.models.holding`)."""
        return Slot(
            node=a.node,
            address=facts.address if facts is not None else "",
            gpus=a.gpus,
            cpus=a.cpus,
            memory=a.memory,
            exclusive=a.exclusive,
            held_gpus=max(facts.gpus, len(a.gpus)) if a.exclusive and facts is not None else None,
            port=self._next_port(facts.host if facts is not None else a.node, ports),
        )

    def _ports_in_use(self, session: Any, nodes: Mapping[str, NodeFacts]) -> dict[str, set[int]]:
        """Per host, the ports the placements of running jobs hold."""
        used: dict[str, set[int]] = {}
        for (placement,) in session.execute(
            select(JobRow.placement).where(JobRow.state.in_(HOLDING))
        ):
            for slot in placement or []:
                facts = nodes.get(slot["node"])
                host = facts.host if facts is not None else slot["node"]
                used.setdefault(host, set()).add(int(slot.get("port", 0)))
        return used

    def _next_port(self, host: str, used: dict[str, set[int]]) -> int:
        """A port no running job holds on ``host``. Ports rotate through the range, so a port a
        job just released (perhaps still in TIME_WAIT) is the last to be handed out again."""
        taken = used.setdefault(host, set())
        span = PORT_RANGE[1] - PORT_RANGE[0]
        for _ in range(span):
            port = PORT_RANGE[0] + self._port_cursor % span
            self._port_cursor += 1
            if port not in taken:
                taken.add(port)
                return port
        raise RuntimeError(f"no free port left on {host} in {PORT_RANGE}")

    def start(
        self,
        session: Session,
        start: Start,
        nodes: Mapping[str, NodeFacts],
        ports: dict[str, set[int]],
        now: float,
    ) -> bool:
        """Write one start (the job goes to ``starting`` with its placement and its worker
        rows); False if the job changed since the snapshot (the decision is dropped)."""
        row = current(session, start.job_id, start.version)
        if row is None:
            return False  # changed since the snapshot (stopped, deleted)
        slots = [self._slot(a, nodes.get(a.node), ports) for a in start.allocations]
        placed_on = ", ".join(dict.fromkeys(s.node for s in slots))
        spec, chosen = _chosen_spec(row.job_spec(), start.choice)
        extra: dict[str, Any] = {}
        if chosen:  # the spec it runs (and resumes) with: the others are dropped
            extra["spec"] = spec.model_dump(mode="json")
            extra.update(request_columns(request_of(spec)))
        resumed = " (resumed)" if row.state == JobState.SUSPENDED else ""
        ft = spec.fault_tolerance
        check = row.check_next or (ft is not None and ft.enabled and ft.preflight)
        if check:
            extra["check_next"] = False
            resumed += ", after a node check"
        try:
            transition(
                session,
                row,
                JobState.STARTING,
                actor=SCHEDULER,
                why=f"placed on {placed_on}{chosen}{resumed}",
                time=now,
                placement=[s.model_dump(mode="json") for s in slots],
                reason=None,
                wait_code=None,
                start_at=None,
                token=secrets.token_hex(16),
                **extra,
            )
        except StaleWrite:
            return False
        session.add_all(worker_rows(row.id, spec, slots, row.attempt, check=check))
        self._reasons.pop(row.id, None)
        return True

    def _record_waits(self, waits: dict[int, tuple[str, str, float | None]]) -> None:
        unknown = [job_id for job_id in waits if job_id not in self._reasons]
        if unknown:
            with self.store.read() as session:
                for chunk in range(0, len(unknown), 900):  # stay under bind-parameter limits
                    rows = session.execute(
                        select(JobRow.id, JobRow.reason, JobRow.wait_code, JobRow.start_at).where(
                            JobRow.id.in_(unknown[chunk : chunk + 900])
                        )
                    )
                    for job_id, reason, code, start_at in rows:
                        self._reasons[job_id] = (reason, code, start_at)
        now = self.clock.monotonic()
        changed = {j: w for j, w in waits.items() if self._due(self._reasons.get(j), w, j, now)}
        self._reasons = {j: self._reasons.get(j, (None, None, None)) for j in waits}
        self._written = {j: t for j, t in self._written.items() if j in waits}
        if not changed:
            return
        with self.store.write() as session:
            # One statement for them all (executemany): not a state change, so no version
            # bump; only while still waiting.
            session.connection().execute(
                _SET_WAIT,
                [
                    {"job": job_id, "why": message, "code": code, "at": start_at}
                    for job_id, (message, code, start_at) in changed.items()
                ],
            )
        self._reasons.update(changed)
        self._written.update(dict.fromkeys(changed, now))

    def _due(
        self,
        written: tuple[str | None, str | None, float | None] | None,
        wait: tuple[str, str, float | None],
        job_id: int,
        now: float,
    ) -> bool:
        """Whether a waiting job's reason should be written now. A new code or expected start
        is written at once; a reworded message (the job it is behind moved on, say) at most
        every :data:`WAIT_REFRESH` seconds: in a deep queue nearly every message changes at
        each pass, and rewriting thousands of them per pass held the write lock."""
        if written == wait:
            return False
        if written is None or written[0] is None or written[1:] != wait[1:]:
            return True
        return now - self._written.get(job_id, -WAIT_REFRESH) >= WAIT_REFRESH


def worker_rows(
    job_id: int, spec: JobSpec, slots: list[Slot], attempt: int, *, check: bool
) -> list[WorkerRow]:
    """The worker rows of an attempt on ``slots``: one per seat of the job, and with
    ``check`` one check worker per node before them (docs/fault-tolerance.md)."""
    rows = [
        WorkerRow(
            job_id=job_id,
            attempt=attempt,
            rank=seat.rank,
            node=slot.node,
            role=seat.role,
            task=seat.task,
            primary=seat.role.primary,
            state=WorkerState.PENDING,
        )
        for seat, slot in zip(seats(launch_spec(spec, len(slots))), slots, strict=True)
    ]
    if check:
        rows += [
            WorkerRow(
                job_id=job_id,
                attempt=attempt,
                rank=CHECK_RANK_BASE + index,
                node=node,
                role=WorkerRole.CHECK,
                task=0,
                primary=False,
                state=WorkerState.PENDING,
            )
            for index, node in enumerate(check_nodes(slots))
        ]
    return rows


def _chosen_spec(spec: JobSpec, choice: int) -> tuple[JobSpec, str]:
    """The spec a job starts with: the first of its specs that fits, the others dropped
    (docs/jobs.md, "The spec"). An elastic job's choice is its size, which the placement carries."""
    if not spec.alternatives:
        return spec, ""
    if choice == 0:
        return spec.model_copy(update={"alternatives": []}), "; its alternative specs are dropped"
    resources = spec.alternatives[choice - 1]
    chosen = spec.model_copy(update={"resources": resources, "alternatives": []})
    return chosen, (
        f" with alternative spec {choice} ({counted(resources.gpus, 'GPU')}, "
        f"{counted(resources.cpus, 'CPU')} per node); the others are dropped"
    )


def launch_spec(spec: JobSpec, slots: int) -> JobSpec:
    """An elastic job runs on as many nodes as it was placed on, this attempt."""
    if spec.min_nodes is None or slots == spec.nodes:
        return spec
    return spec.model_copy(update={"nodes": slots, "min_nodes": None})
