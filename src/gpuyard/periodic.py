"""One background thread that repeats a round until it is stopped.

The inspector, the usage sampler, the forecaster and the disk reserve each run a round on a
daemon thread of their own, beside the controller's loop, and wait between rounds; ``stop()``
wakes the wait and joins the thread. :class:`Periodic` is that start/stop loop, written once:
the owner's round says how long to wait before the next one (its own timing rule: a fixed
interval less the round's duration, the start of the next bucket, …) and handles its own
errors, since what to log differs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Periodic", "paced"]


class Periodic:
    """Run ``round`` on a daemon thread named ``name`` until :meth:`stop`; each round returns
    the seconds to wait before the next."""

    def __init__(self, name: str, round: Callable[[], float]) -> None:
        self.name = name
        self._round = round
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called: a long round looks at it to end early."""
        return self._stop.is_set()

    def start(self, *, wait_first: float = 0.0) -> None:
        """Start the thread. ``wait_first``: wait that long before the first round (a watch
        whose first look the caller took)."""
        self._thread = threading.Thread(
            target=self._run, args=(wait_first,), name=self.name, daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0, *, wake: threading.Event | None = None) -> None:
        """Stop and join. ``wake``: an event the round blocks on, set once the stop is
        visible, so the woken round ends instead of running again."""
        self._stop.set()
        if wake is not None:
            wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when stopped meanwhile."""
        return self._stop.wait(max(0.0, seconds))

    def _run(self, wait_first: float) -> None:
        if wait_first and self.wait(wait_first):
            return
        while not self._stop.is_set():
            self.wait(self._round())


def paced(run: Callable[[], object], every: float, log: logging.Logger, failed: str) -> float:
    """Run ``run`` once, logging ``failed`` with the traceback if it raises (the next round
    tries again), and return the wait that starts the next round ``every`` seconds after this
    one began (at once if this one took longer)."""
    began = time.monotonic()
    try:
        run()
    except Exception:
        log.exception(failed)
    return every - (time.monotonic() - began)
