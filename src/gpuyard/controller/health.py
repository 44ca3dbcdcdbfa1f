"""One job's failure stays that job's; the loop says whether it makes progress.

Every piece of a pass that concerns one job (reading its workers, advancing it, starting it)
runs inside :meth:`JobErrors.guard`. An exception there is logged with the job's id, recorded
as an event of that job, and counted; the other jobs go on. A job whose work keeps failing is
left alone for a growing while (so a poison job cannot turn the loop into a busy loop) and,
after :data:`GIVE_UP_AFTER` consecutive failures, failed with the error as its reason. The
executor is asked about many jobs' workers in one call, and job by job when that call fails
(:func:`ask_job_by_job`), so that one job's broken worker fails that job alone.

:class:`LoopHealth` is what ``/health`` reports: when the last pass completed, the recent
errors, and whether the loop is making progress (a pass completed lately).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpuyard.errors import StorageFull

__all__ = ["GIVE_UP_AFTER", "JobErrors", "LoopHealth", "ask_job_by_job"]

log = logging.getLogger("gpuyard.controller")

H = TypeVar("H")
A = TypeVar("A")

GIVE_UP_AFTER = 5
"""Consecutive failed attempts at one job's work before the job is failed."""
RETRY_AFTER = 0.5
"""Seconds before a job whose work failed is looked at again; doubled after each failure."""
RETRY_AFTER_MAX = 8.0
RECENT = 20
"""Errors kept for ``/health``."""


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class LoopHealth:
    started_at: float
    """Wall-clock time the loop started."""
    stall_after: float = 30.0
    """Seconds without a completed pass after which the loop counts as stalled."""
    last_pass: float | None = None
    """Monotonic time the last pass completed."""
    last_pass_at: float | None = None
    """Wall-clock time of the same."""
    passes: int = 0
    pass_seconds: float = 0.0
    """Seconds all completed passes took together (``/metrics``)."""
    schedules: int = 0
    """Scheduling runs (snapshot, ``decide()``, apply) so far."""
    schedule_seconds: float = 0.0
    last_schedule_seconds: float = 0.0
    failed_passes: int = 0
    """Consecutive passes that failed as a whole (the database was unreachable, say)."""
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT))

    def error(self, at: float, message: str, job: int | None = None) -> None:
        self.recent.append({"time": at, "job": job, "error": message})

    def scheduled(self, seconds: float) -> None:
        self.schedules += 1
        self.schedule_seconds += seconds
        self.last_schedule_seconds = seconds

    def passed(self, monotonic: float, wall: float, seconds: float = 0.0) -> None:
        self.pass_seconds += seconds
        self.last_pass, self.last_pass_at = monotonic, wall
        self.passes += 1
        self.failed_passes = 0

    def progressing(self, monotonic: float, started: float) -> bool:
        since = self.last_pass if self.last_pass is not None else started
        return monotonic - since <= self.stall_after


@dataclass
class _Failures:
    count: int = 0
    retry_at: float = 0.0
    last: str = ""


class JobErrors:
    """Consecutive failures of each job's work, and when to look at the job again."""

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        on_error: Callable[[int, str, int], None],
        health: LoopHealth,
        wall: Callable[[], float],
    ) -> None:
        self.clock = clock
        """Monotonic seconds."""
        self.on_error = on_error
        """Called with (job id, error, consecutive count) after each failure."""
        self.health = health
        self.wall = wall
        self._failures: dict[int, _Failures] = {}
        self._failed_now: set[int] = set()
        """Jobs whose work failed in the current pass."""
        self._done_now: set[int] = set()
        """Jobs whose main step succeeded in the current pass."""
        self._lock = threading.RLock()
        """The loop and the launcher's threads both record failures."""

    def begin_pass(self) -> None:
        with self._lock:
            self._failed_now.clear()
            self._done_now.clear()

    def end_pass(self) -> None:
        """A job whose main step succeeded and nothing else of it failed in this pass starts
        a new count."""
        with self._lock:
            for job_id in self._done_now - self._failed_now:
                self._failures.pop(job_id, None)

    def resting(self, job_id: int) -> bool:
        """Whether the job's work failed lately and waits before it is tried again."""
        found = self._failures.get(job_id)
        return found is not None and self.clock() < found.retry_at

    def count(self, job_id: int) -> int:
        found = self._failures.get(job_id)
        return found.count if found is not None else 0

    def last(self, job_id: int) -> str:
        found = self._failures.get(job_id)
        return found.last if found is not None else ""

    def exhausted(self, job_id: int) -> bool:
        return self.count(job_id) >= GIVE_UP_AFTER

    def jobs(self) -> set[int]:
        """The jobs whose work failed lately (to be tried again)."""
        with self._lock:
            return set(self._failures)

    def forget(self, job_id: int) -> None:
        with self._lock:
            self._failures.pop(job_id, None)

    @contextmanager
    def guard(self, job_id: int, what: str, *, clears: bool = False) -> Iterator[None]:
        """Run one job's piece of a pass; an exception is recorded against the job, not
        raised. ``clears``: this piece is the job's main step (advancing or starting it), and
        its success ends a run of failures at the end of the pass, unless another piece of
        the job failed in the same pass."""
        try:
            yield
        except StorageFull:
            raise  # the pool's, not the job's: the pass fails and backs off until space frees
        except Exception as exc:
            self.failed(job_id, what, exc)
        else:
            if clears:
                self.succeeded(job_id)

    def succeeded(self, job_id: int) -> None:
        """The job's main step (advancing or starting it) succeeded: unless another piece of
        it failed in this pass, its run of failures ends with the pass."""
        with self._lock:
            self._done_now.add(job_id)

    def failed(self, job_id: int, what: str, exc: BaseException) -> None:
        message = f"{what}: {describe(exc)}"
        with self._lock:
            self._failed_now.add(job_id)
            found = self._failures.setdefault(job_id, _Failures())
            found.count += 1
            count = found.count
            found.retry_at = self.clock() + min(RETRY_AFTER_MAX, RETRY_AFTER * 2 ** (count - 1))
            repeated = message == found.last
            found.last = message
            self.health.error(self.wall(), message, job_id)
        if not repeated:
            log.error("job %s: %s", job_id, message, exc_info=exc)
        try:
            self.on_error(job_id, message, count)
        except Exception:  # recording the error must not become an error of its own
            log.exception("job %s: could not record an error", job_id)


def ask_job_by_job(
    rows: Sequence[tuple[int, H]],
    ask: Callable[[list[H]], Sequence[A]],
    errors: JobErrors,
    *,
    what: str,
    batch_failed: str,
) -> list[A | None]:
    """The executor's answer (``ask``) for each (job, handle); None where it could not answer.
    One call for all; if that raises (logged as ``batch_failed``), one call per job, so a
    handle that breaks the executor is that job's error (doing ``what``) and nobody else's."""
    try:
        return list(ask([handle for _, handle in rows]))
    except Exception:
        log.warning(batch_failed, exc_info=True)
    result: list[A | None] = [None] * len(rows)
    for job_id, indices in _by_job(rows).items():
        with errors.guard(job_id, what):
            answers = ask([rows[i][1] for i in indices])
            for i, answer in zip(indices, answers, strict=True):
                result[i] = answer
    return result


def _by_job(rows: Iterable[tuple[int, object]]) -> dict[int, list[int]]:
    """Row indices grouped by job id."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, (job_id, _) in enumerate(rows):
        groups[job_id].append(i)
    return groups
