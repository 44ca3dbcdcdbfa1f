"""Time as a seam: the server and controller take a clock, tests pass a manual one."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (UTC): what is recorded."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back: what intervals are timed on."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._start = start

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now - self._start

    def advance(self, seconds: float) -> None:
        self._now += seconds
