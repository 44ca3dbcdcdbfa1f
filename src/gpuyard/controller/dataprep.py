"""Data preparation of a starting job, as a phase of its own (docs/datasets.md, "Data
preparation").

A job whose dataset mounts say ``prepare: true`` has, after its image is pulled and before its
workers start, each of its nodes hold a verified copy of each such version on the node's fast
storage (:meth:`Executor.prepare_data`); its workers then mount the node's copy, read-only,
where the version's path would have been. Nodes copy at once (one thread each). What it takes
is shown where the job's other phases are: a ``data`` event when the phase begins and one per
node and dataset when its copy is ready (copied and verified, with its size and rate, or
reused), and the job's reason while it copies (``preparing data: 3.1 of 12 GiB``, in ``gpuyard
show`` and on the job's page).

What fails it:

- a file that differs from the version's manifest (:class:`DataMismatch`): the job fails,
  the message naming the file;
- a node without room (:class:`DataNoRoom`): :class:`NodeFull` names the node; the job is
  placed again without that node (``exclude_nodes``), and nothing is cordoned: a full data
  cache is the job's misfortune, the disk probe judges the node's health;
- anything else that keeps a copy from a node: the job fails with its reason.

Runs in the launcher's threads (:mod:`gpuyard.controller.launcher`), never in the loop.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import StaleWrite
from gpuyard.executors.base import DataNoRoom, Executor, LaunchError
from gpuyard.models import JobState
from gpuyard.models.actor import Actor
from gpuyard.models.dataprep import DataSource, PreparedData, prepared, preparing
from gpuyard.models.dataset import Manifest
from gpuyard.models.events import EventKind
from gpuyard.models.job import JobSpec, Mount
from gpuyard.quantities import format_bytes
from gpuyard.services.transitions import record_event
from gpuyard.store.engine import Store
from gpuyard.store.guarded import guarded_update
from gpuyard.store.tables import JobRow

__all__ = ["REASON_EVERY", "DataPrep", "NodeFull", "prepared_mounts", "spec_on_node"]

REASON_EVERY = 1.0
"""Seconds between writes of the job's progress reason."""
ACTOR = Actor.CONTROLLER

Copies = dict[str, dict[str, str]]
"""Per node, per mount name, the node's copy."""


class NodeFull(LaunchError):
    """A node had no room for a copy: the job goes elsewhere (the message says why)."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(message)
        self.node = node


def prepared_mounts(spec: JobSpec) -> list[Mount]:
    """The job's dataset mounts to be copied to its nodes."""
    return prepared(spec.mounts.datasets)


def spec_on_node(spec: JobSpec, copies: dict[str, str]) -> JobSpec:
    """``spec`` with each prepared mount pointed at the node's copy (``copies``, by name)."""
    if not copies:
        return spec
    mounts = [
        m.model_copy(update={"path": copies[m.name], "readonly": True}) if m.name in copies else m
        for m in spec.mounts.datasets
    ]
    return spec.model_copy(update={"mounts": spec.mounts.model_copy(update={"datasets": mounts})})


class DataPrep:
    """The data phase of starting jobs; see the module docstring."""

    def __init__(
        self,
        store: Store,
        executor: Executor,
        clock: Clock,
        *,
        copied: Callable[[int, float], None] = lambda _size, _seconds: None,
    ) -> None:
        """``copied(size, seconds)``: told of each node's copy once it is ready (size 0: the
        node's copy was used), so that the scheduler learns the rate and the node's copy."""
        self.store = store
        self.executor = executor
        self.clock = clock
        self.copied = copied

    def prepare(self, job: JobRow, spec: JobSpec, nodes: Sequence[str]) -> Copies:
        """Have every one of ``nodes`` hold each prepared dataset of ``spec``; where each
        node's copy is. Raises :class:`NodeFull` or :class:`LaunchError`."""
        mounts = prepared_mounts(spec)
        held = list(dict.fromkeys(nodes))
        if not mounts or not held:
            return {}
        sources = self._sources(mounts)
        run = _Run(self, job, sum(s.manifest.size for s in sources.values()) * len(held))
        names = ", ".join(sorted({s.ref for s in sources.values()}))
        size = format_bytes(sum(s.manifest.size for s in sources.values()))
        self._note(job, f"preparing data: {names} ({size}) on {', '.join(held)}")
        copies: Copies = {node: {} for node in held}
        with ThreadPoolExecutor(len(held), thread_name_prefix="data-prep") as pool:
            futures = {node: pool.submit(run.node, node, sources) for node in held}
            errors: list[LaunchError] = []
            for node, future in futures.items():
                try:
                    copies[node] = future.result()
                except LaunchError as exc:
                    errors.append(exc)
        if errors:  # a changed file first: it fails the job wherever it is placed
            errors.sort(key=lambda e: isinstance(e, NodeFull))
            raise errors[0]
        self._set_reason(job, "")
        return copies

    def _sources(self, mounts: list[Mount]) -> dict[str, DataSource]:
        from gpuyard.store.tables import DatasetVersionRow

        ids = {m.dataset_version for m in mounts}
        with self.store.read() as session:
            rows = {
                r.id: (r.path, r.manifest, r.digest)
                for r in session.scalars(
                    select(DatasetVersionRow).where(DatasetVersionRow.id.in_(ids))
                )
            }
        sources = {}
        for mount in mounts:
            assert mount.dataset_version is not None
            assert mount.dataset is not None
            found = rows.get(mount.dataset_version)
            if found is None or found[1] is None:
                raise LaunchError(
                    f"dataset {mount.dataset} cannot be prepared: its version is gone or has "
                    "no manifest"
                )
            path, manifest, digest = found
            sources[mount.name] = DataSource(
                version_id=mount.dataset_version,
                ref=mount.dataset,
                path=path,
                manifest=Manifest.model_validate(manifest),
                digest=digest,
            )
        return sources

    def _note(self, job: JobRow, what: str, *, reason: str | None = None) -> None:
        """A ``data`` event, and the job's reason (``what`` unless given)."""
        with self.store.write() as session:
            record_event(
                session, job, kind=EventKind.DATA, actor=ACTOR, reason=what, time=self.clock.now()
            )
            self._reason_in(session, job, what if reason is None else reason)

    def check_starting(self, job: JobRow) -> None:
        """Raise LaunchError once the job is no longer starting (stopped, say): raised from
        the copy's progress, it stops the copy and drops what was copied, so a stopped job's
        preparation does not go on for minutes."""
        with self.store.read() as session:
            state = session.scalar(select(JobRow.state).where(JobRow.id == job.id))
        if state != JobState.STARTING:
            raise LaunchError(f"job {job.id} is {state or 'gone'}: its data preparation stops")

    def _set_reason(self, job: JobRow, reason: str) -> None:
        with self.store.write() as session:
            self._reason_in(session, job, reason)

    @staticmethod
    def _reason_in(session: Session, job: JobRow, reason: str) -> None:
        with contextlib.suppress(StaleWrite):  # stopped meanwhile: the loop sees it
            guarded_update(session, job, reason=reason)


class _Run:
    """One job's phase: the nodes' progress added up, written at most every second."""

    def __init__(self, prep: DataPrep, job: JobRow, total: int) -> None:
        self.prep = prep
        self.job = job
        self.total = total
        self.done: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()
        self.next_write = 0.0

    def node(self, node: str, sources: dict[str, DataSource]) -> dict[str, str]:
        copies = {}
        for name, source in sources.items():
            began = time.monotonic()
            try:
                prepared = self.prep.executor.prepare_data(
                    node,
                    source,
                    job_id=self.job.id,
                    progress=functools.partial(self.progress, (node, name)),
                )
            except DataNoRoom as exc:
                raise NodeFull(node, f"node {node}: {exc}") from None
            except LaunchError as exc:
                raise LaunchError(f"preparing data on {node}: {exc}") from None
            self.progress((node, name), source.manifest.size)
            seconds = time.monotonic() - began
            self.prep.copied(prepared.copied, seconds)
            with self.lock:
                self.prep._note(self.job, _ready(source, node, prepared, seconds))
            copies[name] = prepared.path
        return copies

    def progress(self, key: tuple[str, str], done: int, _total: int = 0) -> None:
        with self.lock:
            self.done[key] = done
            now = time.monotonic()
            if now < self.next_write:
                return
            self.next_write = now + REASON_EVERY
            self.prep._set_reason(self.job, preparing(sum(self.done.values()), self.total))
            self.prep.check_starting(self.job)


def _ready(source: DataSource, node: str, prepared: PreparedData, seconds: float) -> str:
    if not prepared.copied:
        return f"dataset {source.ref} on {node}: its copy there is used"
    rate = f" ({prepared.copied / seconds / 1e6:.0f} MB/s)" if seconds > 0 else ""
    return (
        f"prepared dataset {source.ref} on {node}: {format_bytes(prepared.copied)} copied "
        f"and verified in {seconds:.1f} s{rate}"
    )
