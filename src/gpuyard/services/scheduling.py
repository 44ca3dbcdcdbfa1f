"""Scheduling requests a person makes about one job: suspend it, or ask when it will start.

Suspending by hand follows the same protocol as a preemption (docs/preemption.md): the job is
told, checkpoints, exits and goes back to the queue at its original position. Predictions run
the real scheduler forward over the queue (:mod:`gpuyard.scheduler.predict`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import Conflict
from gpuyard.models import JobSpec, JobState, JobView, Prediction
from gpuyard.models.access import Action
from gpuyard.models.actor import Actor
from gpuyard.models.request import request_of
from gpuyard.models.states import PENDING
from gpuyard.scheduler import Snapshot
from gpuyard.scheduler.durations import JobFeatures
from gpuyard.scheduler.predict import Forecast, in_words, predict
from gpuyard.services.auth import Audit, Policy
from gpuyard.services.disclosure import Viewer
from gpuyard.services.notify import Notify, nobody
from gpuyard.services.suspension import HOLDABLE, begin_suspension, set_held
from gpuyard.services.views import job_view
from gpuyard.store.durations import RunTimes
from gpuyard.store.engine import Store
from gpuyard.store.forecasts import stored_forecast
from gpuyard.store.snapshot import hypothetical, load_snapshot
from gpuyard.store.tables import JobRow, UserRow

__all__ = ["ON_DEMAND_STEPS", "SchedulingService"]

ON_DEMAND_STEPS = 500
"""Scheduling cycles a prediction made in a request replays at most (a dry run, or a job
changed since the controller's last forecast); beyond them it says no time can be given."""


class SchedulingService:
    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        notify: Notify = nobody,
        check_submission: Callable[[JobSpec, str], None] = lambda _spec, _owner: None,
        policy: Policy | None = None,
        run_times: RunTimes | None = None,
        data_locality: Callable[[Snapshot], Snapshot] | None = None,
    ) -> None:
        """``run_times``: predicted run times for the forecasts made here (None: none).
        ``data_locality``: puts the nodes' dataset copies and the copy rate on a snapshot
        (None: no node holds a copy, and the default rate)."""
        self.policy = policy or Policy(store, clock, Audit(clock))
        self.run_times = run_times
        self.data_locality = data_locality
        self.store = store
        self.clock = clock
        self.notify = notify
        self.check_submission = check_submission
        """What a submission would be refused for (tiers, limits, pools): a dry run says so
        rather than predict a start that cannot happen."""

    def suspend(self, job_id: int, *, actor: str, hold: bool = False) -> JobView:
        """Ask a running job to checkpoint and requeue (docs/preemption.md); with ``hold``,
        keep it held once suspended, a pause until it is released. A suspending job is
        suspended already (``hold`` holds it); with ``hold``, a waiting one is held."""
        now = self.clock.now()
        with self.store.write() as session:
            row = self.policy.check_job(
                session, actor, session.get(JobRow, job_id), job_id, Action.SUSPEND
            )
            state = JobState(row.state)
            if state is JobState.RUNNING:
                begin_suspension(
                    session, row, actor=Actor.user(actor), why=f"suspended by {actor}", now=now
                )
                self.policy.audit.record(session, Actor.user(actor), "job.suspend", f"job:{job_id}")
            elif not (state is JobState.SUSPENDING or (hold and state in HOLDABLE)):
                raise Conflict(_not_suspendable(job_id, state))
            if hold:
                set_held(session, row, actor=actor, held=True, now=now, audit=self.policy.audit)
            view = job_view(row)
        self.notify(job_id)
        return view

    def prediction(self, job_id: int, *, actor: str) -> Prediction:
        now = self.clock.now()
        with self.store.read() as session:
            row = self.policy.check_job(
                session, actor, session.get(JobRow, job_id), job_id, Action.VIEW
            )
            if JobState(row.state) not in PENDING:
                raise Conflict(
                    f"job {job_id} is {JobState(row.state).status.label}, not queued: there is "
                    "no start to predict"
                )
            viewer = Viewer.of(session, self.policy, actor)
            stored = stored_forecast(row.prediction or {}, row.version)
            run_time = None
            if self.run_times is not None:
                told = self.run_times.of_job(session, job_id, now)
                run_time = None if told is None else told.describe()
            if stored is not None:  # the controller's, made for this version of the job
                return self._prediction(session, viewer, stored, now, run_time)
            # Changed since the last forecast (just submitted, say): this job alone, bounded.
            snapshot = self._snapshot(session, now)
            found = predict(snapshot, job_id, max_steps=ON_DEMAND_STEPS)
            return self._prediction(session, viewer, found, now, run_time)

    def predict(self, spec: JobSpec, *, owner: str) -> Prediction:
        """When ``spec`` would start if it were submitted now (nothing is stored)."""
        self.check_submission(spec, owner)
        now = self.clock.now()
        with self.store.read() as session:
            snapshot = self._snapshot(session, now)
            user = session.get(UserRow, owner)
            seq = (session.scalar(select(func.max(JobRow.id))) or 0) + 1
            group = (user.group_name or "") if user else ""
            request = request_of(spec)
            job = hypothetical(
                snapshot, request, priority=spec.priority, owner=owner, group=group, seq=seq
            )
            told = None
            if self.run_times is not None:
                told = self.run_times.predict(
                    JobFeatures(
                        user=owner,
                        group=group,
                        name=spec.effective_name(),
                        gpus=request.request.gpus,
                        nodes=request.request.nodes,
                    )
                )
                if told is not None:
                    job = replace(job, predicted=told.seconds)
            snapshot = replace(snapshot, pending=(*snapshot.pending, job))
            found = predict(snapshot, job.id, max_steps=ON_DEMAND_STEPS)
            viewer = Viewer.of(session, self.policy, owner)
            return self._prediction(
                session, viewer, found, now, None if told is None else told.describe()
            )

    def _snapshot(self, session: Session, now: float) -> Snapshot:
        snapshot = load_snapshot(session, now)
        if self.run_times is not None and snapshot.pending:
            snapshot = self.run_times.apply(session, snapshot)
        if self.data_locality is not None:
            snapshot = self.data_locality(snapshot)
        return snapshot

    def _prediction(
        self,
        session: Session,
        viewer: Viewer,
        forecast: Forecast,
        now: float,
        run_time: str | None = None,
    ) -> Prediction:
        """The forecast as ``viewer`` may read it: the jobs it may not see are counted, not
        named, in the lists and in the sentence (docs/security.md); with the range of its
        start where it waits on predicted run times."""
        within = None if self.run_times is None else self.run_times.within(session, forecast, now)
        ahead = viewer.disclose(session, forecast.ahead)
        waits = viewer.disclose(session, forecast.waits_for)
        shown = replace(forecast, ahead=ahead.shown, waits_for=waits.shown)
        return Prediction(
            now=forecast.now,
            start_at=_when(forecast.start_at),
            earliest=None if within is None else _when(within[0]),
            latest=None if within is None else _when(within[1]),
            ahead=list(ahead.shown),
            hidden_ahead=ahead.hidden,
            waits_for=list(waits.shown),
            hidden_waits_for=waits.hidden,
            run_time=run_time,
            reason=in_words(
                shown, now, hidden_ahead=ahead.hidden, hidden_waits=waits.hidden, within=within
            ),
        )


def _when(at: float | None) -> datetime | None:
    return None if at is None or math.isinf(at) else datetime.fromtimestamp(at, UTC)


def _not_suspendable(job_id: int, state: JobState) -> str:
    hint = (
        "; it is still being launched, try again in a moment" if state is JobState.STARTING else ""
    )
    return f"job {job_id} is {state.value}: only a running job can be suspended{hint}"
