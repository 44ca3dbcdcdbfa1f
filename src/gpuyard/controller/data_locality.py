"""What the scheduler is told of the nodes' dataset copies (docs/datasets.md, "Data
preparation"): which versions each node holds a complete copy of, and the rate the pool's own
preparations copied at.

Both are live facts of this process, not stored: the holdings are the executor's
(:meth:`Executor.data_held`, a look at each node's data cache), read at most every
:data:`HELD_EVERY` seconds and again after each preparation (a copy evicted meanwhile only
costs a preference); the rate is that of the last :data:`RATES_KEPT` copies large enough to
measure, else :data:`~gpuyard.scheduler.COPY_RATE`. The scheduler gets them on its snapshot
(:meth:`DataLocality.apply`): placement prefers the nodes holding a job's prepared data among
equally good ones, and queue prediction counts the copy of the rest.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import replace

from gpuyard.clock import Clock
from gpuyard.executors.base import Executor, LaunchError
from gpuyard.scheduler import COPY_RATE, Snapshot

__all__ = ["HELD_EVERY", "MEASURED_FROM", "RATES_KEPT", "DataLocality"]

log = logging.getLogger("gpuyard.controller")

HELD_EVERY = 10.0
"""Seconds the executor's view of the nodes' copies serves at most."""
MEASURED_FROM = 1.0
"""Seconds a copy must take for its rate to count: a shorter one's time is mostly opening
files and starting threads, not copying."""
RATES_KEPT = 8
"""Copies whose rate is averaged (bytes over seconds, in all)."""

_NONE: frozenset[int] = frozenset()


class DataLocality:
    """The nodes' copies and the copy rate, for the snapshots of this process's passes and
    forecasts; safe to use from several threads."""

    def __init__(self, executor: Executor, clock: Clock, *, every: float = HELD_EVERY) -> None:
        self.executor = executor
        self.clock = clock
        self.every = every
        self._lock = threading.Lock()
        self._held: Mapping[str, frozenset[int]] = {}
        self._read_at: float | None = None
        self._copies: deque[tuple[int, float]] = deque(maxlen=RATES_KEPT)

    def copied(self, size: int, seconds: float) -> None:
        """A preparation copied ``size`` bytes to a node in ``seconds`` (0 bytes: it used the
        copy there): a measure of the rate, and the node now holds the version."""
        with self._lock:
            self._read_at = None
            if size > 0 and seconds >= MEASURED_FROM:
                self._copies.append((size, seconds))

    @property
    def rate(self) -> float:
        """Bytes per second the measured copies took, or the default."""
        with self._lock:
            seconds = sum(s for _, s in self._copies)
            return sum(b for b, _ in self._copies) / seconds if seconds > 0 else COPY_RATE

    def held(self) -> Mapping[str, frozenset[int]]:
        """Per node, the dataset versions it holds a copy of."""
        now = self.clock.monotonic()
        with self._lock:
            if self._read_at is not None and now - self._read_at < self.every:
                return self._held
            try:
                self._held = self.executor.data_held()
            except (OSError, LaunchError) as exc:  # a preference, never a pass's failure
                log.warning("cannot read the nodes' dataset copies: %s", exc)
            self._read_at = now
            return self._held

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with each node's copies and the copy rate."""
        held = self.held()
        nodes = snapshot.nodes
        if held or any(n.datasets for n in nodes):
            nodes = tuple(
                n
                if n.datasets == (found := held.get(n.name, _NONE))
                else replace(n, datasets=found)
                for n in nodes
            )
        return replace(snapshot, nodes=nodes, copy_rate=self.rate)
