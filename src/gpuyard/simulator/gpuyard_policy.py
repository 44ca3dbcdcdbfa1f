"""``--policy gpuyard``: the simulation state as a :class:`gpuyard.scheduler.Snapshot`, decided
by :func:`gpuyard.scheduler.decide`, the function the server's controller calls.

Only what a real scheduler knows reaches the snapshot: the nodes, each pending job's request,
owner, group, priority and submission order, each running job's allocations, start and
attempt. The trace's run time never does (this policy is registered without the oracle:
``PolicyContext.durations`` is None here). No max runtime either (the traces carry no user
limits), and no pool policies or quotas unless given: every pool is ``preemption: never``
(Venus has one tier anyway). The scheduler's suspensions are applied as preemptions (the
engine frees the GPUs at once and adds the overhead to the job's remaining work).

Predicted run times, as the server's controller gives them (``predict=True``): a
:class:`~gpuyard.scheduler.durations.DurationPredictor` learns from each job as the replay
sees it finish, never from one that has not (no look-ahead). A pending job carries its
predicted remaining run time, a running one its predicted end (re-predicted, given how long
it has run, once it outlives it). What each job was told when it was submitted is kept in
:attr:`GpuyardPolicy.told_at_submission`, for the report to score against what it ran
(:func:`gpuyard.simulator.metrics.prediction_error`).

Requests: a job of up to a node's GPUs asks for that many GPUs on one node; a larger one
asks for whole nodes (``gpus // G`` whole nodes of ``G`` GPUs, plus one member for the
remainder), or, when the trace gives its node count, that many equal whole-node members.
CPUs and memory are not in the traces: requests and nodes carry none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpuyard.scheduler import (
    Allocation,
    Member,
    NodeCapacity,
    PendingJob,
    PoolPolicy,
    Request,
    RunningJob,
    Snapshot,
    decide,
)
from gpuyard.scheduler.durations import (
    DurationPredictor,
    JobFeatures,
    Prediction,
    start_range,
)
from gpuyard.scheduler.predict import predict
from gpuyard.simulator.policy import (
    Decision,
    PolicyContext,
    SimJob,
    SimulationError,
    Slot,
    StartJob,
    View,
)

__all__ = ["FORECAST_STEPS", "FinishedJob", "GpuyardPolicy", "request_for"]

FORECAST_STEPS = 300
"""Scheduling cycles a sampled queue prediction replays at most (the server's on-demand
bound is 500)."""


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """What the pool knows of a job once it has ended."""

    index: int
    user: str
    group: str
    gpus: int
    submit: float
    ran: float
    """Seconds it ran (all its runs)."""


def request_for(gpus: int, nodes: int | None, node_gpus: int) -> Request:
    """The scheduler request of a trace job on nodes of ``node_gpus`` GPUs (see module doc)."""
    if nodes is not None and nodes > 1 and gpus % nodes == 0:
        return Request.uniform(nodes=nodes, gpus=gpus // nodes, cpus=0.0)
    if gpus <= node_gpus:
        return Request.uniform(nodes=1, gpus=gpus, cpus=0.0)
    whole, rest = divmod(gpus, node_gpus)
    members = [Member(node_gpus, 0.0, 0, whole_node=True)] * whole
    if rest:
        members.append(Member(rest, 0.0, 0))
    return Request(tuple(members))


class GpuyardPolicy:
    def __init__(
        self,
        context: PolicyContext,
        *,
        pools: Mapping[str, PoolPolicy] | None = None,
        predict: bool = True,
    ) -> None:
        """``pools``: the pool policies of the snapshot (default: none, so ``never``).
        ``predict``: learn run times from finished jobs and give them to the scheduler."""
        partition = context.partition
        self._pools = dict(pools or {})
        nodes = partition.nodes
        self._nodes = tuple(
            NodeCapacity(
                name=n.name,
                gpus=n.gpus,
                cpus=0.0,
                memory=0,
                labels={"gpu_model": n.node_class, "cluster": partition.name},
            )
            for n in nodes
        )
        self._node_index = {n.name: i for i, n in enumerate(nodes)}
        self._node_gpus = {n.name: n.gpus for n in nodes}
        self._largest = partition.largest_node
        self._pending: dict[int, PendingJob] = {}
        """Snapshot entries of pending jobs, built once per queue entry."""
        self._running: dict[int, RunningJob] = {}
        self.history: list[FinishedJob] = []
        self.predictor = DurationPredictor() if predict else None
        self._told: dict[int, Prediction | None] = {}
        """What each job was predicted to run when it was submitted (scored when it ends)."""
        self.told_at_submission: dict[int, tuple[float, float, float]] = {}
        """The same as (seconds, low, high), kept for the report."""
        self._learnt = 0
        """Jobs the predictor had learnt from when the pending entries were last refreshed."""
        self._forecast_every = context.forecast_every
        self.start_forecasts: dict[int, tuple[float | None, float | None, float | None]] = {}
        """The start predicted for sampled jobs when they were submitted: (start, earliest,
        latest), as a user would have been told (``PolicyContext.forecast_every``)."""

    def decide(self, view: View) -> Decision:
        for job in view.finished:
            self._running.pop(job.index, None)
            self.history.append(
                FinishedJob(job.index, job.user, job.group, job.gpus, job.submit, job.ran)
            )
            self._learn(job)
        if self.predictor is not None:
            for job in view.submitted:
                told = self._told[job.index] = self.predictor.predict(_features(job))
                if told is not None:
                    self.told_at_submission[job.index] = (told.seconds, told.low, told.high)
        pending = tuple(self._pending_job(job) for job in view.pending.values())
        self._learnt = self.predictor.observed if self.predictor is not None else 0
        running = tuple(self._running_job(job, view.now) for job in view.running.values())
        snapshot = Snapshot(
            now=view.now, nodes=self._nodes, pending=pending, running=running, pools=self._pools
        )
        if self._forecast_every:
            for job in view.submitted:
                if job.index % self._forecast_every == 0 and job.index in view.pending:
                    self.start_forecasts[job.index] = self._forecast(snapshot, job.index, view)
        decisions = decide(snapshot)
        starts: list[StartJob] = []
        for start in decisions.starts:
            job = view.pending[start.job_id]
            entry = self._pending.pop(start.job_id)
            self._running[start.job_id] = RunningJob(
                id=job.index,
                priority=job.priority,
                owner=job.user,
                allocations=start.allocations,
                group=job.group,
                version=job.preemptions,
                started_at=view.now,
                predicted_end=None if entry.predicted is None else view.now + entry.predicted,
                attained=job.attained_gpu_seconds(view.now),
                queued=job.queue_time(view.now),
                suspensions=job.preemptions,
                # Simulated jobs checkpoint and resume, paying the engine's overhead: as
                # jobs that listen for the notice do, they lose no work beyond it.
                saves_on_notice=True,
            )
            starts.append(StartJob(job.index, self._slots(start.allocations)))
        # A suspension frees the victim's GPUs at once; the engine asks again right away.
        preempts = [p.job_id for p in decisions.preempts if p.job_id in view.running]
        return Decision(starts=starts, preempts=preempts)

    def _forecast(
        self, snapshot: Snapshot, index: int, view: View
    ) -> tuple[float | None, float | None, float | None]:
        """The queue prediction a user would get at submission: its start, and the range
        the predicted ends it waits on give it (as the server words it)."""
        found = predict(snapshot, index, max_steps=FORECAST_STEPS)
        if found.now:
            return (view.now, view.now, view.now)
        if found.start_at is None or math.isinf(found.start_at):
            return (None, None, None)
        ends = [self._interval_of(job_id, view) for job_id in found.waits_for]
        within = start_range(found.start_at, view.now, [e for e in ends if e is not None])
        low, high = within or (found.start_at, found.start_at)
        return (found.start_at, low, high)

    def _interval_of(self, job_id: int, view: View) -> Prediction | None:
        if self.predictor is None:
            return None
        running = view.running.get(job_id)
        if running is not None:
            return self.predictor.predict(_features(running), elapsed=running.attained(view.now))
        return self._told.get(job_id)

    def _learn(self, job: SimJob) -> None:
        if self.predictor is None:
            return
        told = self._told.pop(job.index, None)
        self.predictor.observe(_features(job), job.ran, told=told)

    def _predicted(self, job: SimJob) -> float | None:
        """Seconds the job should still run, given what it ran in earlier attempts."""
        if self.predictor is None:
            return None
        prediction = self.predictor.predict(_features(job), elapsed=job.ran)
        return None if prediction is None else prediction.seconds - job.ran

    def _pending_job(self, job: SimJob) -> PendingJob:
        cached = self._pending.get(job.index)
        if (
            cached is None
            or cached.version != job.preemptions
            or (
                cached.predicted is None
                and self.predictor is not None
                and self._learnt != self.predictor.observed
            )
        ):
            cached = PendingJob(
                id=job.index,
                version=job.preemptions,
                priority=job.priority,
                seq=job.index,
                owner=job.user,
                request=request_for(job.gpus, job.nodes, self._largest),
                group=job.group,
                attained=job.attained_gpu_seconds(job.submit),
                # Waited in all = now - submit - time run: what the server knows of it.
                queued_since=job.submit + job.ran,
                predicted=self._predicted(job),
            )
            self._pending[job.index] = cached
        return cached

    def _running_job(self, job: SimJob, now: float) -> RunningJob:
        known = self._running.get(job.index)
        if known is None:
            raise SimulationError(f"job {job.job_id} runs but was not started by this policy")
        end = known.predicted_end
        if self.predictor is not None and (end is None or end <= now):
            # Outlived its prediction (or had none): predicted again, given how long it ran.
            ran = job.attained(now)
            prediction = self.predictor.predict(_features(job), elapsed=ran)
            if prediction is not None:
                known = self._running[job.index] = replace(
                    known, predicted_end=now + prediction.seconds - ran
                )
        return known

    def _slots(self, allocations: tuple[Allocation, ...]) -> tuple[Slot, ...]:
        # An exclusive allocation holds its whole node, whatever it uses of it.
        return tuple(
            Slot(
                self._node_index[a.node],
                self._node_gpus[a.node] if a.exclusive else len(a.gpus),
            )
            for a in allocations
        )


def _features(job: SimJob) -> JobFeatures:
    """What the predictor knows of a trace job: no name nor command in the traces."""
    return JobFeatures(user=job.user, group=job.group, gpus=job.gpus, nodes=job.nodes or 1)
