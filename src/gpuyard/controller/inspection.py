"""The periodic node inspection, run beside the loop (docs/node-health.md).

Every :data:`INSPECT_EVERY` seconds (``GPUYARD_INSPECT_INTERVAL``) the inspector asks the
executor to inspect its nodes (:meth:`gpuyard.executors.base.Executor.inspect`) and hands what
it found to :func:`gpuyard.services.nodes.record_inspection`, which stores it and cordons a
node on a new critical finding. It runs on a thread of its own, never inside a reconcile pass:
NVML, a disk or a remote agent can take seconds, and the loop must not wait for them.

The executor's answer is awaited for at most ``deadline`` seconds. An executor that has not
answered by then has missed its heartbeat: each of its nodes gets a critical ``heartbeat``
finding (new the first time, so it cordons), and keeps its other findings as last known (Xid
events excepted: they were reported once). A call that hangs is not started again while it
hangs; a later inspection waits for it, again at most ``deadline`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import select

from gpuyard.clock import Clock
from gpuyard.executors.base import Executor
from gpuyard.models import NodeState
from gpuyard.models.health import Finding, Probe, ProbeStatus
from gpuyard.periodic import Periodic, paced
from gpuyard.services.checkpoints import ended_jobs, memory_to_free
from gpuyard.services.nodes import record_inspection, stored_findings
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeRow

__all__ = ["DEADLINE", "INSPECT_EVERY", "Inspector"]

log = logging.getLogger("gpuyard.controller")

INSPECT_EVERY = 60.0
"""Seconds between inspections (the ``inspect_interval`` setting's default)."""
DEADLINE = 30.0
"""Seconds the executor has to answer an inspection before it has missed its heartbeat."""

STOP_CHECK = 0.1
"""Seconds between looks at whether to stop while an inspection runs."""

Found = dict[str, list[Finding]]


class _Call:
    """One ``inspect()`` on a daemon thread: a hung call never blocks the process's exit."""

    def __init__(self, inspect: Callable[[], Found]) -> None:
        self.done = threading.Event()
        self.result: Found | None = None
        self.error: Exception | None = None
        self._inspect = inspect
        threading.Thread(target=self._run, name="inspect", daemon=True).start()

    def _run(self) -> None:
        try:
            self.result = self._inspect()
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()


class Inspector:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        clock: Clock,
        *,
        every: float = INSPECT_EVERY,
        deadline: float = DEADLINE,
        cordoned: Callable[[], None] = lambda: None,
    ) -> None:
        """``every``: seconds between inspections, 0 for none (:meth:`run_once` still runs
        one). ``deadline``: seconds the executor has to answer; an inspection that takes
        longer than the interval delays the next. ``cordoned``: called after an inspection
        cordoned a node."""
        self.store = store
        self.executor = executor
        self.clock = clock
        self.every = every
        self.deadline = deadline
        self.cordoned = cordoned
        self._call: _Call | None = None
        self._memory_idle: dict[int, float] = {}
        """Jobs holding node memory but no node, and since when (:meth:`free_memory`)."""
        self._periodic = Periodic("inspector", self._round)

    def start(self) -> None:
        if self.every <= 0:
            return
        self._periodic.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._periodic.stop(timeout)

    def _round(self) -> float:
        return paced(self.run_once, self.every, log, "inspecting the nodes failed")

    def run_once(self) -> dict[str, list[Finding]]:
        """Inspect every node and record it; return the nodes cordoned, with the findings
        that did it. An executor whose inspection raises records nothing (a bug, not a
        node's fault: it is raised)."""
        found = self._ask()
        if not found or self._periodic.stopping:
            return {}
        with self.store.write() as session:
            cordoned = record_inspection(session, found, now=self.clock.now())
        self.free_memory()
        self.free_data()
        for node, findings in cordoned.items():
            log.warning(
                "node %s cordoned by its inspection: %s",
                node,
                "; ".join(f.describe() for f in findings),
            )
        if cordoned:
            self.cordoned()
        return cordoned

    def free_memory(self) -> None:
        """Free the node memory of jobs that have ended, or that have held no node for a
        while (docs/checkpoints.md)."""
        held = self.executor.memory_jobs()
        if not held:
            return
        with self.store.read() as session:
            free = memory_to_free(session, held, self._memory_idle, self.clock.now())
        for job_id in sorted(free):
            self.executor.drop_memory(job_id)

    def free_data(self) -> None:
        """Unpin the dataset copies of jobs that have ended (their last use), then drop the
        copies past their retention or the cache's cap (docs/datasets.md)."""
        held = self.executor.data_jobs()
        if held:
            with self.store.read() as session:
                ended = ended_jobs(session, held)
            for job_id in sorted(ended):
                self.executor.release_data(job_id)
        self.executor.sweep_data()

    def _ask(self) -> Found:
        """The executor's findings, or a missed heartbeat on each of its nodes."""
        if self._call is None or self._call.done.is_set():
            self._call = _Call(self.executor.inspect)
        call = self._call
        end = time.monotonic() + self.deadline
        while not call.done.wait(max(0.0, min(end - time.monotonic(), STOP_CHECK))):
            if self._periodic.stopping:
                return {}  # stopping: a missed heartbeat now would be ours, not the node's
            if time.monotonic() >= end:
                return self._missed()
        if call.error is not None:
            raise call.error
        return call.result or {}

    def _missed(self) -> Found:
        with self.store.read() as session:
            rows = session.execute(
                select(NodeRow.name, NodeRow.health).where(
                    NodeRow.executor == self.executor.name, NodeRow.state != NodeState.GONE
                )
            ).all()
        missed = Finding(
            probe=Probe.HEARTBEAT,
            status=ProbeStatus.CRITICAL,
            value="no answer",
            message=f"the executor did not answer the inspection within {self.deadline:g} s",
        )
        return {
            name: [
                missed,
                *(
                    f
                    for f in stored_findings(health)
                    if f.probe is not Probe.HEARTBEAT and not f.event
                ),
            ]
            for name, health in rows
        }
