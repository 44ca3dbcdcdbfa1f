"""This process's side of the preemption protocol: notice, acknowledgement, suspension, progress.

A `Runtime` holds what one process knows: whether a notice arrived (by signal, by the flag file,
from the simulate switch, or from a peer rank), whether it acknowledged, when it last reported
progress. The module functions of `gpuyard.runtime` use one per process (`current()`), built
from ``os.environ`` the first time it is needed; tests build their own with a manual clock.

`Runtime.preemption_requested` is meant to be called every training step. Its usual path is
one attribute test, one ``time.monotonic()`` and one comparison; the flag file is looked at
(one ``open``) at most every `CHECK_INTERVAL` seconds, and a notice signal makes the next call
look at once.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal, NoReturn, Protocol, SupportsFloat

from gpuyard.runtime.contract import EXIT_SUSPENDED, JobEnvironment
from gpuyard.runtime.control import (
    ACK,
    CHECKPOINT,
    PREEMPT,
    PROGRESS,
    SAVING,
    SUSPENDED,
    json_number,
    register_listener,
    unregister_listener,
    write_json,
)

__all__ = [
    "CHECK_INTERVAL",
    "PROGRESS_INTERVAL",
    "SIMULATED_GRACE",
    "Clock",
    "NoticeSource",
    "PreemptionNotice",
    "Runtime",
    "SystemClock",
    "current",
    "reset",
]

CHECK_INTERVAL = 0.5
"""Seconds between two looks at ``preempt.json``; the signal makes the next look immediate."""

PROGRESS_INTERVAL = 1.0
"""Seconds between two writes of ``progress.json`` (docs/preemption.md: "about once a second")."""

SIMULATED_GRACE = 60.0
"""A simulated notice's deadline, in seconds after it arrives."""

NoticeSource = Literal["file", "signal", "simulated", "peer"]


class Clock(Protocol):
    """Time as a seam: tests drive the rate limits and the simulate switch by hand."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, rate limits)."""
        ...

    def time(self) -> float:
        """Unix epoch seconds (the times written into the control files)."""
        ...


class SystemClock:
    """The real clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


@dataclass(frozen=True, slots=True)
class PreemptionNotice:
    """A request to leave: exit (after saving) before `deadline`.

    `source` says how it came: ``file`` (``preempt.json``), ``signal`` (the notice signal, with
    the file's details when it was there), ``simulated`` (``GPUYARD_SIMULATE_PREEMPTION_AFTER``)
    or ``peer`` (another rank saw it, and `gpuyard.runtime.torch.preemption_agreed` said so).
    """

    source: NoticeSource
    requested_at: float | None = None
    deadline: float | None = None
    reason: str | None = None
    by: str | None = None


class Runtime:
    """One process's state in the protocol, over one `JobEnvironment`."""

    def __init__(
        self,
        env: JobEnvironment,
        *,
        clock: Clock | None = None,
        check_interval: float = CHECK_INTERVAL,
        progress_interval: float = PROGRESS_INTERVAL,
    ) -> None:
        self.env = env
        self._clock: Clock = clock or SystemClock()
        self._monotonic = self._clock.monotonic
        self._check_interval = check_interval
        self._progress_interval = progress_interval
        self._lock = threading.Lock()
        self._notice: PreemptionNotice | None = None
        # The hot path polls only once the monotonic clock passes this; -inf means "now".
        self._wake_at = -math.inf
        self._next_file_check = -math.inf if env.control_dir else math.inf
        self._started = False
        self._simulate_at: float | None = None
        self._signalled_at: float | None = None
        self._previous_handler: Any = None
        self._handler: Callable[[int, FrameType | None], None] | None = None
        self._listener_pid: int | None = None
        self._acknowledged = False
        self._last_progress: float | None = None

    # -- the notice ----------------------------------------------------------------------

    def preemption_requested(self) -> bool:
        """True once a notice arrived; cheap enough to call every step."""
        if self._notice is not None:
            return True
        now = self._monotonic()
        if now >= self._wake_at:
            self._poll(now)
        return self._notice is not None

    def preemption_notice(self) -> PreemptionNotice | None:
        """The notice, if one arrived (this polls, like `preemption_requested`)."""
        self.preemption_requested()
        notice = self._notice
        if notice is not None and notice.source == "signal" and notice.deadline is None:
            # The platform writes the file before it signals; look again in case this process
            # caught the signal first (a reader never sees half a file, only none).
            detailed = self._read_notice_file("signal")
            if detailed is not None:
                self._notice = notice = detailed
        return notice

    def record_peer_notice(self) -> None:
        """Another rank has a notice this one has not seen yet: treat it as this one's too."""
        if self._notice is None:
            self._notice = PreemptionNotice(source="peer", requested_at=self._clock.time())

    def _poll(self, now: float) -> None:
        with self._lock:
            if self._notice is not None:
                return
            if not self._started:
                self._start(now)
            if self._handler is None and self.env.control_dir is not None:
                self._install_handler()
            notice = None
            if self._signalled_at is not None or now >= self._next_file_check:
                if self.env.control_dir is not None:
                    self._next_file_check = now + self._check_interval
                source: NoticeSource = "file" if self._signalled_at is None else "signal"
                notice = self._read_notice_file(source)
                if notice is None and self._signalled_at is not None:
                    notice = PreemptionNotice(source="signal", requested_at=self._signalled_at)
            if notice is None and self._simulate_at is not None and now >= self._simulate_at:
                notice = self._simulated_notice()
            self._notice = notice
            simulate_at = math.inf if self._simulate_at is None else self._simulate_at
            self._wake_at = min(self._next_file_check, simulate_at)
            if self._signalled_at is not None:
                # The signal came while this poll ran, after its look: the next call looks.
                self._wake_at = -math.inf

    def _start(self, now: float) -> None:
        self._started = True
        after = self.env.simulate_after
        if after is not None and self.env.attempt == 0:
            self._simulate_at = now + after

    def _simulated_notice(self) -> PreemptionNotice:
        at = self._clock.time()
        return PreemptionNotice(
            source="simulated",
            requested_at=at,
            deadline=at + SIMULATED_GRACE,
            reason=f"simulated: GPUYARD_SIMULATE_PREEMPTION_AFTER={self.env.simulate_after:g}",
            by="simulation",
        )

    def _read_notice_file(self, source: NoticeSource) -> PreemptionNotice | None:
        if self.env.control_dir is None:
            return None
        try:
            text = (self.env.control_dir / PREEMPT).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError:
            text = ""
        try:
            content = json.loads(text)
        except ValueError:
            content = None
        if not isinstance(content, dict):
            # It exists, so it is a notice, even if this reader cannot make sense of it.
            return PreemptionNotice(source=source)
        return PreemptionNotice(
            source=source,
            requested_at=_float_or_none(content.get("requested_at")),
            deadline=_float_or_none(content.get("deadline")),
            reason=_str_or_none(content.get("reason")),
            by=_str_or_none(content.get("by")),
        )

    # -- the signal and listeners/<pid> ----------------------------------------------------

    def _install_handler(self) -> None:
        """Catch the notice signal, then say so in ``listeners/<pid>``, from the main thread.

        Python runs signal handlers in the main thread only, and `signal.signal` refuses other
        threads; a call from another thread leaves it for a later call from the main one. The
        listener file comes after the handler: the platform must never signal a process whose
        signal would still have its default action, which is to end the process.
        """
        control_dir = self.env.control_dir
        if control_dir is None or threading.current_thread() is not threading.main_thread():
            return
        signum = self.env.preempt_signal
        previous = signal.getsignal(signum)

        def on_notice(received: int, frame: FrameType | None) -> None:
            # Runs between two bytecodes of the main thread, maybe inside `_poll` with the lock
            # held: set two attributes, take no lock.
            self._signalled_at = self._clock.time()
            self._wake_at = -math.inf
            if callable(previous):
                previous(received, frame)

        signal.signal(signum, on_notice)
        self._handler, self._previous_handler = on_notice, previous
        pid = os.getpid()
        register_listener(control_dir, pid)
        self._listener_pid = pid
        atexit.register(self._unregister_listener)

    def _unregister_listener(self) -> None:
        if self.env.control_dir is not None and self._listener_pid == os.getpid():
            unregister_listener(self.env.control_dir, self._listener_pid)
        self._listener_pid = None

    def close(self) -> None:
        """Put back the previous signal handler and remove ``listeners/<pid>``.

        A script never needs this (the listener file goes at exit); tests and `reset` do.
        """
        self._unregister_listener()
        atexit.unregister(self._unregister_listener)
        if self._handler is not None:
            with contextlib.suppress(ValueError):  # not the main thread: leave it
                if signal.getsignal(self.env.preempt_signal) is self._handler:
                    signal.signal(self.env.preempt_signal, self._previous_handler)
            self._handler = None

    # -- what the script tells the platform -------------------------------------------------

    def acknowledge(self, *, rank: int | None = None) -> None:
        """Write ``ack.json`` (once per process; later calls do nothing)."""
        if self._acknowledged:
            return
        self._acknowledged = True
        if self.env.control_dir is not None:
            content = {
                "time": self._clock.time(),
                "pid": os.getpid(),
                "rank": rank if rank is not None else self.env.rank,
            }
            write_json(self.env.control_dir, ACK, content)

    def suspend(self) -> NoReturn:
        """Write ``suspended.json``, flush stdio, and exit with `EXIT_SUSPENDED` (75)."""
        self.acknowledge()
        if self.env.control_dir is not None:
            content = {"time": self._clock.time(), "pid": os.getpid()}
            write_json(self.env.control_dir, SUSPENDED, content)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        raise SystemExit(EXIT_SUSPENDED)

    def report_progress(self, step: int, **metrics: SupportsFloat | str | None) -> bool:
        """Write ``progress.json`` unless the last write was under `progress_interval` ago.

        Returns whether it wrote. The first call always writes.
        """
        now = self._monotonic()
        last = self._last_progress
        if last is not None and now - last < self._progress_interval:
            return False
        self._last_progress = now
        if self.env.control_dir is None:
            return False
        content = {
            "time": self._clock.time(),
            "step": int(step),
            "metrics": {name: json_number(value) for name, value in metrics.items()},
        }
        write_json(self.env.control_dir, PROGRESS, content)
        return True

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """While a checkpoint is being saved: ``saving.json`` says so (a hang timer allows for
        it), and is removed when the save ends, however it ends."""
        if self.env.control_dir is None:
            yield
            return
        marker = write_json(
            self.env.control_dir, SAVING, {"time": self._clock.time(), "pid": os.getpid()}
        )
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                marker.unlink()

    def record_checkpoint(self, path: Path, *, step: int | None = None) -> None:
        """Write ``checkpoint.json``: a checkpoint is complete at `path`."""
        if self.env.control_dir is not None:
            content = {
                "time": self._clock.time(),
                "step": None if step is None else int(step),
                "path": str(Path(path).absolute()),
            }
            write_json(self.env.control_dir, CHECKPOINT, content)


def _float_or_none(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


_current: Runtime | None = None
_current_lock = threading.Lock()


def current() -> Runtime:
    """This process's runtime, built from ``os.environ`` on first use."""
    runtime = _current
    if runtime is not None:
        return runtime
    return _create()


def _create() -> Runtime:
    global _current  # noqa: PLW0603 - one runtime per process is the point
    with _current_lock:
        if _current is None:
            env = JobEnvironment.from_environ(os.environ, cwd=Path.cwd())
            _current = Runtime(env)
        return _current


def reset() -> None:
    """Forget this process's runtime (it is rebuilt from ``os.environ`` on next use).

    For tests, and for a program that runs several jobs' code in one process: the old one's
    signal handler and listener file are removed.
    """
    global _current
    with _current_lock:
        runtime, _current = _current, None
    if runtime is not None:
        runtime.close()
