"""The pool's home on a full disk: a reserve of space that is let go when the disk fills.

The database (SQLite in ``<home>``), the supervisors' files and the jobs' directories share the
home's filesystem, so a job that fills it would otherwise take the control plane with it. At
start the pool makes ``<home>/disk.reserve`` (``GPUYARD_DISK_RESERVE`` bytes, allocated, not
sparse, 0600). A thread looks at the free space every second; when it falls below
:data:`LOW` (or a write to the store has just failed for want of space), the reserve is
removed, so that the database can still record what happens (exits, stops, submissions)
while an admin or the jobs free space. Once twice the reserve is free again, it is made again
and the pool is healthy: it recovers by itself. :meth:`DiskReserve.state` is the ``disk``
section of ``/health``, which says ``degraded`` and why while the reserve is gone.
(docs/security.md#logs-and-disk-space)
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from gpuyard.periodic import Periodic
from gpuyard.quantities import format_bytes

__all__ = ["LOW", "DiskReserve"]

log = logging.getLogger("gpuyard.disk")

LOW = 1 << 20
"""Free bytes below which the reserve is let go."""
CHECK_EVERY = 1.0
"""Seconds between looks at the free space."""


class DiskReserve:
    """The reserve file in ``home`` (``size`` bytes; 0: none, only the free space is shown)."""

    def __init__(self, home: Path, size: int, *, check_every: float = CHECK_EVERY) -> None:
        self.home = home
        self.path = home / "disk.reserve"
        self.size = size
        self.check_every = check_every
        self._lock = threading.Lock()
        self._periodic = Periodic("gpuyard-disk", self._round)
        self._reason = ""

    def start(self) -> None:
        self.check()
        self._periodic.start(wait_first=self.check_every)

    def stop(self) -> None:
        self._periodic.stop(5)

    def _round(self) -> float:
        try:
            self.check()
        except Exception:  # one bad look must not end the watch
            log.exception("looking at the pool's free disk space")
        return self.check_every

    def check(self) -> None:
        """Let the reserve go if space ran out; make it again once there is room."""
        free = shutil.disk_usage(self.home).free
        held = self.path.exists()
        if held and free < LOW:
            self.release("free space ran out")
        elif not held and self.size and free >= 2 * self.size:
            self._make()

    def release(self, why: str = "a write failed: the disk is full") -> None:
        """Remove the reserve now (a store write failed for want of space, or space ran out)."""
        with self._lock:
            if not self.path.exists():
                return
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self._reason = why
        log.error(
            "the disk of the pool's home %s is full (%s): released its %s reserve so that the "
            "database can still write; free space there",
            self.home,
            why,
            format_bytes(self.size),
        )

    def _make(self) -> None:
        with self._lock:
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                try:
                    os.posix_fallocate(fd, 0, self.size)
                finally:
                    os.close(fd)
                tmp.replace(self.path)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                self._reason = f"the reserve cannot be made: {exc.strerror or exc}"
                return
            was = self._reason
            self._reason = ""
        if was:
            log.warning("the pool's home %s has room again: its disk reserve is back", self.home)

    def state(self) -> dict[str, Any]:
        """The ``disk`` section of ``/health``: ``status`` ok or full, the figures, the reason."""
        usage = shutil.disk_usage(self.home)
        held = not self.size or self.path.exists()
        reason = ""
        if not held:
            reason = (
                f"the disk of the pool's home is full ({format_bytes(usage.free)} free of "
                f"{format_bytes(usage.total)}; {self._reason or 'no room for its reserve'}): "
                f"its {format_bytes(self.size)} reserve is released so that the database can "
                "still write; running jobs go on, new work may be refused until space is freed"
            )
        return {
            "status": "ok" if held else "full",
            "free": usage.free,
            "total": usage.total,
            "reserve": self.size,
            "reserve_held": held and bool(self.size),
            "reason": reason,
        }
