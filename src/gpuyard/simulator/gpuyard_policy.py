"""``--policy gpuyard``: the simulation state as a :class:`gpuyard.scheduler.Snapshot`, decided
by :func:`gpuyard.scheduler.decide`, the function the server's controller calls.

Only what a real scheduler knows reaches the snapshot: the nodes, each pending job's request,
owner, group, priority and submission order, each running job's allocations, start and
attempt. The trace's run time never does (this policy is registered without the oracle:
``PolicyContext.durations`` is None here). No max runtime either (the traces carry no user
limits), and no pool policies or quotas: every pool is ``preemption: never`` (Venus has one
tier anyway). Jobs that finished are kept in :attr:`GpuyardPolicy.history` (owner, GPUs,
run time) for duration estimates once the snapshot carries them. The scheduler's
suspensions are applied as preemptions (the engine frees the GPUs at once and adds the
overhead to the job's remaining work).

Requests: a job of up to a node's GPUs asks for that many GPUs on one node; a larger one
asks for whole nodes (``gpus // G`` whole nodes of ``G`` GPUs, plus one member for the
remainder), or, when the trace gives its node count, that many equal whole-node members.
CPUs and memory are not in the traces: requests and nodes carry none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
from gpuyard.simulator.policy import (
    Decision,
    PolicyContext,
    SimJob,
    SimulationError,
    Slot,
    StartJob,
    View,
)

__all__ = ["FinishedJob", "GpuyardPolicy", "request_for"]


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
        self, context: PolicyContext, *, pools: Mapping[str, PoolPolicy] | None = None
    ) -> None:
        """``pools``: the pool policies of the snapshot (default: none, so ``never``)."""
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

    def decide(self, view: View) -> Decision:
        for job in view.finished:
            self._running.pop(job.index, None)
            self.history.append(
                FinishedJob(job.index, job.user, job.group, job.gpus, job.submit, job.ran)
            )
        pending = tuple(self._pending_job(job) for job in view.pending.values())
        running = tuple(self._running_job(job) for job in view.running.values())
        snapshot = Snapshot(
            now=view.now, nodes=self._nodes, pending=pending, running=running, pools=self._pools
        )
        decisions = decide(snapshot)
        starts: list[StartJob] = []
        for start in decisions.starts:
            job = view.pending[start.job_id]
            self._pending.pop(start.job_id, None)
            self._running[start.job_id] = RunningJob(
                id=job.index,
                priority=job.priority,
                owner=job.user,
                allocations=start.allocations,
                group=job.group,
                version=job.preemptions,
                started_at=view.now,
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

    def _pending_job(self, job: SimJob) -> PendingJob:
        cached = self._pending.get(job.index)
        if cached is None or cached.version != job.preemptions:
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
            )
            self._pending[job.index] = cached
        return cached

    def _running_job(self, job: SimJob) -> RunningJob:
        known = self._running.get(job.index)
        if known is None:
            raise SimulationError(f"job {job.job_id} runs but was not started by this policy")
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
