"""The executor's nodes in the store, for the loop (:mod:`gpuyard.controller.loop`).

At start the loop records the nodes the executor presents; an executor whose nodes come and
go (its ``node_refresh`` seconds, e.g. a Ray cluster's) is asked again in the passes. A node
that joins is scheduled on at the next pass; one it no longer presents becomes ``gone`` (and
cordoned again when it comes back, if it was). What ``CUDA_VISIBLE_DEVICES`` names for each
node's GPUs is read once per node set, for the launch plans.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from sqlalchemy import select

from gpuyard.clock import Clock
from gpuyard.controller.health import describe
from gpuyard.executors.base import Executor
from gpuyard.models import NodeState
from gpuyard.models.worker import NodeInfo
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeRow

__all__ = ["Nodes"]

log = logging.getLogger("gpuyard.controller")


class Nodes:
    """The executor's nodes as recorded; ``changed`` is called whenever they are recorded
    (the pool changed: schedule soon)."""

    def __init__(
        self, store: Store, executor: Executor, clock: Clock, *, changed: Callable[[], None]
    ) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self._changed = changed
        self._last = 0.0
        self._infos: list[NodeInfo] | None = None
        self._devices: dict[str, Sequence[str]] | None = None

    def refresh(self, began: float) -> bool:
        """Read the nodes again when the executor's nodes come and go (its ``node_refresh``
        seconds, e.g. a Ray cluster's; 0 or absent: only at start), and record them when they
        changed. Whether a node left: its workers are to be looked at now."""
        every = float(getattr(self.executor, "node_refresh", 0.0) or 0.0)
        if not every or began - self._last < every:
            return False
        self._last = began
        try:
            infos = self.executor.nodes()
        except Exception as exc:  # the nodes stay as last recorded; the next look may do
            log.warning("cannot read the executor's nodes: %s", describe(exc))
            return False
        if infos == self._infos:
            return False
        left = {n.name for n in self._infos or ()} - {n.name for n in infos}
        self.register(infos)
        return bool(left)

    def register(self, nodes: Sequence[NodeInfo] | None = None) -> None:
        """Record the executor's nodes (``nodes``: as just read); nodes it no longer presents
        become ``gone``."""
        now = self.clock.now()
        listed = list(self.executor.nodes() if nodes is None else nodes)
        self._infos = listed
        self._last = self.clock.monotonic()
        infos = {n.name: n for n in listed}
        with self.store.write() as session:
            existing = {row.name: row for row in session.scalars(select(NodeRow))}
            for name, info in infos.items():
                row = existing.get(name)
                if row is None:
                    row = NodeRow(name=name)
                    session.add(row)
                    row.state = NodeState.READY
                elif row.state is NodeState.GONE:  # back, and cordoned if it was
                    row.state = NodeState.CORDONED if row.cordon_reason else NodeState.READY
                self._record(row, info, now)
            for name, row in existing.items():
                if name not in infos and row.executor == self.executor.name:
                    row.state = NodeState.GONE
                    row.updated_at = now
        self._devices = None
        self._changed()

    def _record(self, row: NodeRow, info: NodeInfo, now: float) -> None:
        row.address = info.address
        row.executor = self.executor.name
        row.gpus = info.gpus
        row.gpu_model = info.gpu_model
        row.gpu_devices = list(info.gpu_devices)
        row.cpus = info.cpus
        row.memory = info.memory
        row.labels = dict(info.labels)
        row.updated_at = now

    def gpu_devices(self) -> dict[str, Sequence[str]]:
        """Per node, what CUDA_VISIBLE_DEVICES names for each GPU (read once per node set)."""
        if self._devices is None:
            with self.store.read() as session:
                self._devices = {
                    name: tuple(str(d) for d in devices)
                    for name, devices in session.execute(select(NodeRow.name, NodeRow.gpu_devices))
                }
        return self._devices
