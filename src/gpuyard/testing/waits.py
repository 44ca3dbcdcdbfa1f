"""Reading and waiting on an executor's workers, for the executor tests: a worker's whole log,
a text in it, a condition met in time, a worker's first answer once it has ended."""

from __future__ import annotations

import time
from collections.abc import Callable

from gpuyard.executors.base import Executor
from gpuyard.models.worker import Handle, WorkerState, WorkerStatus

__all__ = ["first_ended", "wait_log", "wait_until", "whole_log"]


def whole_log(executor: Executor, handle: Handle) -> str:
    """The worker's log from its start (its first MiB), as text."""
    return executor.read_log(handle, 0, 1 << 20)[0].decode()


def wait_log(executor: Executor, handle: Handle, text: str, timeout: float = 20) -> None:
    """Return once the worker's log holds ``text``; fail the test, showing the log, if the
    worker ends first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while text not in whole_log(executor, handle):
        [status] = executor.status([handle])
        if status.state is not WorkerState.RUNNING or time.monotonic() > deadline:
            log = whole_log(executor, handle)
            raise AssertionError(f"no {text!r} in the log: {log!r} ({status})")
        time.sleep(0.02)


def wait_until(predicate: Callable[[], bool], timeout: float = 10) -> None:
    """Return once ``predicate()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def first_ended(executor: Executor, handle: Handle, timeout: float = 10) -> WorkerStatus:
    """The first status of the worker that is not RUNNING: the one a controller records."""
    deadline = time.monotonic() + timeout
    while (status := executor.status([handle])[0]).state is WorkerState.RUNNING:
        assert time.monotonic() < deadline, "still running"
        time.sleep(0.01)
    return status
