"""Queue predictions, computed beside the loop and stored for the API to read.

Answering "when will it start?" replays the scheduler forward over the whole queue: far too
much work for an HTTP request (an API thread replaying 2,000 cycles stalled every other
request). The forecaster replays the queue once for every queued job
(:func:`gpuyard.scheduler.forecast`, within a time budget), at most every
:data:`FORECAST_EVERY` seconds and only when the queue or the pool changed, and stores each
job's forecast with the version of the job it was made for. The API reads it
(:meth:`gpuyard.services.scheduling.SchedulingService.prediction`); only a job changed since
its last forecast (just submitted, say) is predicted on demand, alone and bounded.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

from sqlalchemy import Table, bindparam, or_, update

from gpuyard.clock import Clock
from gpuyard.controller.data_locality import DataLocality
from gpuyard.models.states import PENDING
from gpuyard.periodic import Periodic, paced
from gpuyard.scheduler import Budget, forecast, frozen_heap
from gpuyard.store.durations import RunTimes
from gpuyard.store.engine import Store
from gpuyard.store.forecasts import forecast_to_store
from gpuyard.store.snapshot import SnapshotLoader
from gpuyard.store.tables import JobRow

__all__ = ["FORECAST_EVERY", "Forecaster"]

log = logging.getLogger("gpuyard.controller")

FORECAST_EVERY = 5.0
"""Seconds between forecasts, at most."""
BUDGET = 1.0
"""Seconds one forecast may take; the jobs it did not reach are stored as unknown."""

_JOBS = cast("Table", JobRow.__table__)
_SET = (
    update(_JOBS)
    .where(
        _JOBS.c.id == bindparam("job"),
        or_(*(_JOBS.c.state == s for s in sorted(PENDING))),
    )
    .values(prediction=bindparam("forecast"))
)


class Forecaster:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        every: float = FORECAST_EVERY,
        budget: float = BUDGET,
        run_times: RunTimes | None = None,
        data: DataLocality | None = None,
    ) -> None:
        """``run_times``: the predictions to put on each snapshot (None: none); ``data``:
        the nodes' dataset copies and the copy rate to put on it (None: none)."""
        self.store = store
        self.run_times = run_times
        self.data = data
        self.clock = clock
        self.every = every
        self.budget = budget
        self._loader = SnapshotLoader(lambda: store.generation("nodes", "pools"))
        self._written: dict[int, dict[str, Any]] = {}
        self._changed = threading.Event()
        self._periodic = Periodic("forecaster", self._round)

    def changed(self) -> None:
        """The queue or the pool changed: forecast again (at most every ``every`` s)."""
        self._changed.set()

    def start(self) -> None:
        self._periodic.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._periodic.stop(timeout, wake=self._changed)

    def _round(self) -> float:
        """Wait for a change, then forecast; the next round waits ``every`` s at least."""
        self._changed.wait()
        if self._periodic.stopping:
            return 0.0
        self._changed.clear()
        return paced(self.run_once, self.every, log, "forecasting the queue failed")

    def run_once(self) -> int:
        """Forecast every queued job and store what changed; return how many were stored."""
        now = self.clock.now()
        with frozen_heap() as freeze:
            with self.store.read() as session:
                snapshot = self._loader.load(session, now, monotonic=self.clock.monotonic())
                if self.run_times is not None and snapshot.pending:
                    snapshot = self.run_times.apply(session, snapshot)
            if not snapshot.pending:
                self._written.clear()
                return 0
            if self.data is not None:
                snapshot = self.data.apply(snapshot)
            freeze()
            found = forecast(
                snapshot, budget=Budget(seconds=self.budget, clock=self.clock.monotonic)
            )
            versions = {job.id: job.version for job in snapshot.pending}
        stored = {job_id: forecast_to_store(f, versions[job_id]) for job_id, f in found.items()}
        changed = [
            {"job": job_id, "forecast": data}
            for job_id, data in stored.items()
            if self._written.get(job_id) != data
        ]
        self._written = stored
        if changed:
            with self.store.write() as session:
                session.connection().execute(_SET, changed)
        return len(changed)
