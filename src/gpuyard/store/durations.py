"""The pool's duration predictor, fed from the store (docs/scheduling.md#predicted-run-times).

:class:`RunTimes` keeps a :class:`~gpuyard.scheduler.durations.DurationPredictor` learnt from
the jobs that ended (the last :data:`HISTORY` at first, then each one as it ends) and puts its
predictions on a snapshot: each queued job's predicted remaining run time, each running job's
predicted end. A process keeps one (the controller's passes and forecasts share theirs; the
server's queue predictions have their own) and calls :meth:`~RunTimes.apply` after loading a
snapshot. Nothing of it is written: a restart learns the history again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from gpuyard.models import JobState
from gpuyard.scheduler import PendingJob, RunningJob, Snapshot
from gpuyard.scheduler.durations import (
    Accuracy,
    DurationPredictor,
    JobFeatures,
    Prediction,
    start_range,
)
from gpuyard.scheduler.predict import Forecast
from gpuyard.store.tables import JobRow

__all__ = ["HISTORY", "RunTimes", "features_of"]

HISTORY = 10_000
"""Ended jobs learnt from at first (the most recent)."""
BATCH = 1_000
"""Ended jobs read at a time."""
REFRESH = 60.0
"""Seconds a queued job's prediction serves before it is made again from what was learnt
since (a running job's is made again once it outlives it)."""

_ENDED = tuple(sorted(s for s in JobState if s.is_terminal()))
_FEATURES = (
    JobRow.id,
    JobRow.owner,
    JobRow.group_name,
    JobRow.name,
    JobRow.gpus,
    JobRow.nodes,
    JobRow.image_digest,
)


def features_of(row: Any) -> JobFeatures:
    """A job's features from its row (the columns of ``_FEATURES``). The command is not
    among them: the scheduler reads plain columns, never specs, and a job's name says as much
    of what it runs (docs/scheduling.md#predicted-run-times)."""
    nodes = max(row.nodes or 1, 1)
    return JobFeatures(
        user=row.owner,
        group=row.group_name or "",
        name=row.name or "",
        gpus=(row.gpus or 0) * nodes,
        nodes=nodes,
        image=row.image_digest or "",
    )


class RunTimes:
    def __init__(self) -> None:
        self.predictor = DurationPredictor()
        self._lock = threading.Lock()
        self._mark: tuple[float, int] | None = None
        """(finished_at, id) of the last ended job learnt."""
        self._features: dict[int, tuple[int, JobFeatures, float]] = {}
        """Queued and running jobs' (version, features, seconds run before this attempt)."""
        self._told: dict[int, Prediction] = {}
        """What each queued job was first predicted to run: scored when it ends."""
        self._queued: dict[int, tuple[PendingJob, float, PendingJob]] = {}
        """Per queued job: the loader's entry, when it was predicted, the entry with it."""
        self._ends: dict[int, tuple[int, float]] = {}
        """Per running job: (version, predicted end)."""
        self._memo: dict[tuple[JobFeatures, float], Prediction | None] = {}
        """Predictions made in the current :meth:`apply`, by (features, seconds run)."""

    def apply(self, session: Session, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with predictions: learn what ended since the last call, then predict
        its queued jobs (again every :data:`REFRESH` s) and its running ones."""
        with self._lock:
            self._learn(session)
            self._load_features(session, [*snapshot.pending, *snapshot.running])
            self._memo = {}
            pending = tuple(self._queued_job(job, snapshot.now) for job in snapshot.pending)
            running = tuple(self._running_job(job, snapshot.now) for job in snapshot.running)
            self._forget({job.id for job in snapshot.pending} | {j.id for j in snapshot.running})
        return replace(snapshot, pending=pending, running=running)

    def predict(self, features: JobFeatures) -> Prediction | None:
        """What a job of these features would be told now (a dry run)."""
        with self._lock:
            return self.predictor.predict(features)

    def within(
        self, session: Session, forecast: Forecast, now: float
    ) -> tuple[float, float] | None:
        """The range of a forecast start (:func:`~gpuyard.scheduler.durations.start_range`
        of the predicted ends it waits on), None when it waits on none."""
        if forecast.start_at is None or forecast.now or not forecast.waits_for:
            return None
        ends: list[Prediction] = []
        with self._lock:
            rows = session.execute(
                select(
                    *_FEATURES, JobRow.ran, JobRow.started_at, JobRow.state, JobRow.max_runtime
                ).where(JobRow.id.in_(list(forecast.waits_for)[:500]))
            )
            for row in rows:
                if row.max_runtime is not None:
                    continue  # it ends by its limit: no prediction moves the start
                running = JobState(row.state).holds_resources() and row.started_at is not None
                elapsed = (row.ran or 0.0) + (
                    max(0.0, now - row.started_at) if running and row.started_at else 0.0
                )
                prediction = self.predictor.predict(features_of(row), elapsed=elapsed)
                if prediction is not None:
                    ends.append(prediction)
        return start_range(forecast.start_at, now, ends)

    def of_job(self, session: Session, job_id: int, now: float) -> Prediction | None:
        """A job's run time in all, as predicted now (given what it has run, if it runs)."""
        row = session.execute(
            select(*_FEATURES, JobRow.ran, JobRow.started_at, JobRow.state).where(
                JobRow.id == job_id
            )
        ).first()
        if row is None:
            return None
        elapsed = row.ran or 0.0
        if JobState(row.state).holds_resources() and row.started_at is not None:
            elapsed += max(0.0, now - row.started_at)
        with self._lock:
            self._learn(session)
            return self.predictor.predict(features_of(row), elapsed=elapsed)

    def accuracy(self, session: Session) -> Accuracy:
        """How the predictions of the jobs learnt so far compared with what they ran."""
        with self._lock:
            self._learn(session)
            return self.predictor.accuracy

    # -- learning -------------------------------------------------------------------------

    def _learn(self, session: Session) -> None:
        if self._mark is None:
            rows = list(
                session.execute(
                    _ended().order_by(JobRow.finished_at.desc(), JobRow.id.desc()).limit(HISTORY)
                )
            )
            rows.reverse()
            self._observe(rows)
            if rows:
                self._mark = (rows[-1].finished_at, rows[-1].id)
            else:
                self._mark = (float("-inf"), 0)
            return
        while True:
            at, last = self._mark
            rows = list(
                session.execute(
                    _ended()
                    .where(
                        or_(
                            JobRow.finished_at > at,
                            and_(JobRow.finished_at == at, JobRow.id > last),
                        )
                    )
                    .order_by(JobRow.finished_at, JobRow.id)
                    .limit(BATCH)
                )
            )
            if not rows:
                return
            self._observe(rows)
            self._mark = (rows[-1].finished_at, rows[-1].id)
            if len(rows) < BATCH:
                return

    def _observe(self, rows: Sequence[Any]) -> None:
        """Learn each ended job, scored on what it was told when this process first saw it
        queued, else on what it would have been told just before it ended."""
        for row in rows:
            ran = (row.ran or 0.0) + max(0.0, row.finished_at - row.started_at)
            features = features_of(row)
            told = self._told.pop(row.id, None) or self.predictor.predict(features)
            self.predictor.observe(features, ran, told=told)

    # -- predicting -----------------------------------------------------------------------

    def _load_features(self, session: Session, jobs: Iterable[PendingJob | RunningJob]) -> None:
        known = self._features
        missing = [job.id for job in jobs if known.get(job.id, (-1,))[0] != job.version]
        for chunk in range(0, len(missing), 500):  # bind-parameter limits
            ids = missing[chunk : chunk + 500]
            for row in session.execute(
                select(*_FEATURES, JobRow.version, JobRow.ran).where(JobRow.id.in_(ids))
            ):
                known[row.id] = (row.version, features_of(row), row.ran or 0.0)

    def _queued_job(self, job: PendingJob, now: float) -> PendingJob:
        cached = self._queued.get(job.id)
        if cached is not None and cached[0] is job and now - cached[1] < REFRESH:
            return cached[2]
        found = self._features.get(job.id)
        if found is None:
            return job
        _, features, ran = found
        key = (features, ran)
        if key in self._memo:  # a queue holds many jobs alike: predicted once per pass
            prediction = self._memo[key]
        else:
            prediction = self._memo[key] = self.predictor.predict(features, elapsed=ran)
        if prediction is not None and job.id not in self._told and not ran:
            self._told[job.id] = prediction
        predicted = None if prediction is None else prediction.seconds - ran
        entry = job if predicted == job.predicted else replace(job, predicted=predicted)
        self._queued[job.id] = (job, now, entry)
        return entry

    def _running_job(self, job: RunningJob, now: float) -> RunningJob:
        known = self._ends.get(job.id)
        if known is None or known[0] != job.version or known[1] <= now:
            found = self._features.get(job.id)
            if found is None:
                return job
            _, features, ran = found
            elapsed = ran + max(0.0, now - job.started_at)
            prediction = self.predictor.predict(features, elapsed=elapsed)
            if prediction is None:
                return job
            known = self._ends[job.id] = (job.version, now + prediction.seconds - elapsed)
        return replace(job, predicted_end=known[1])

    def _forget(self, present: set[int]) -> None:
        """Drop what concerns jobs no longer queued or running (their told predictions stay
        until they are learnt, or until they are long gone)."""
        for cache in (self._features, self._queued, self._ends):
            for job_id in [j for j in cache if j not in present]:
                del cache[job_id]
        if len(self._told) > 4 * max(len(present), 1_000):
            for job_id in [j for j in self._told if j not in present]:
                del self._told[job_id]


def _ended() -> Any:
    return select(
        *_FEATURES, JobRow.ran, JobRow.started_at, JobRow.finished_at, JobRow.state
    ).where(
        JobRow.state.in_(_ENDED),
        JobRow.finished_at.is_not(None),
        JobRow.started_at.is_not(None),
    )
