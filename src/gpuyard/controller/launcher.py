"""Launching the workers of started jobs, beside the reconcile loop rather than inside it.

Starting a worker is the slow part of a start: directories, a cgroup, a supervisor process
(each a fork and an exec). Done inside the scheduling pass, a pass that placed 150 gangs spent
seconds launching before it could notice a freed node or record a waiting reason, and the API
got little of the interpreter meanwhile. So the scheduler's starts are written in one short
transaction and handed here, and a few threads launch them while the loop goes on.

A job handed to the launcher is *claimed*: the loop leaves it alone (no drain, no give-up)
until its launch is done, so that the loop never sees a half-launched job and, say, ends a
stopped job whose workers are being started that moment. Once a job's launch is done the loop
is woken for it (a stop that came meanwhile is acted on then).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable

from sqlalchemy import select

from gpuyard.controller.health import JobErrors
from gpuyard.errors import StaleWrite
from gpuyard.models import JobState
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow

__all__ = ["Launcher"]

log = logging.getLogger("gpuyard.controller")

THREADS = 4
"""Launches at once: most of a launch is system calls, which run without the GIL."""


class Launcher:
    def __init__(
        self,
        store: Store,
        *,
        launch: Callable[[JobRow, list[WorkerRow]], None],
        errors: JobErrors,
        done: Callable[[int], None],
        threads: int = THREADS,
    ) -> None:
        self.store = store
        self._launch = launch
        self.errors = errors
        self._done = done
        """Told each job id whose launch is over (the loop looks at it again)."""
        self._threads_wanted = threads
        self._queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._claimed: set[int] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    def start(self) -> None:
        if self._threads:
            return
        for i in range(self._threads_wanted):
            thread = threading.Thread(target=self._run, name=f"launcher-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the launches under way and drop the queued ones: their jobs stay starting,
        and the next controller launches them (a launch is idempotent)."""
        self._stopping.set()
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    @property
    def running(self) -> bool:
        """Whether threads launch what is submitted (else :meth:`launch_now` must)."""
        return bool(self._threads)

    def claimed(self, job_id: int) -> bool:
        """Whether ``job_id`` is being launched (the loop leaves it alone meanwhile)."""
        return job_id in self._claimed

    def submit(self, job_ids: Iterable[int]) -> None:
        """Launch these starting jobs' workers; a job already claimed is not queued twice."""
        with self._lock:
            fresh = [j for j in job_ids if j not in self._claimed]
            self._claimed.update(fresh)
        for job_id in fresh:
            self._queue.put(job_id)

    def launch_now(self) -> None:
        """Launch every queued job in the calling thread (no threads: tests with a manual
        clock, where each pass must leave the pool in a known state)."""
        while True:
            try:
                job_id = self._queue.get_nowait()
            except queue.Empty:
                return
            if job_id is not None:
                self._one(job_id)

    def _run(self) -> None:
        while (job_id := self._queue.get()) is not None and not self._stopping.is_set():
            self._one(job_id)

    def _one(self, job_id: int) -> None:
        try:
            with self.errors.guard(job_id, "launching its workers", clears=True):
                job, workers = self._load(job_id)
                if job is not None and job.state is JobState.STARTING:
                    # A StaleWrite: it changed meanwhile, and the loop looks at it again.
                    with contextlib.suppress(StaleWrite):
                        self._launch(job, workers)
        finally:
            with self._lock:
                self._claimed.discard(job_id)
            try:
                self._done(job_id)
            except Exception:
                log.exception("job %s: after its launch", job_id)

    def _load(self, job_id: int) -> tuple[JobRow | None, list[WorkerRow]]:
        with self.store.read() as session:
            job = session.get(JobRow, job_id)
            if job is None:
                return None, []
            workers = list(
                session.scalars(
                    select(WorkerRow)
                    .where(WorkerRow.job_id == job_id, WorkerRow.attempt == job.attempt)
                    .order_by(WorkerRow.rank)
                )
            )
        return job, workers
