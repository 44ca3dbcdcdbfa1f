"""Nodes with what is used and free on each, their cordons, and what inspections found.

:func:`record_inspection` holds the rules of the periodic node inspection (docs/node-health.md):
the latest findings are stored with the node, a *new* critical finding
(:func:`gpuyard.models.health.newly_critical`) cordons a schedulable node with
``cordoned_by="inspection"``, and a GPU's Xid is attributed to the jobs placed on that GPU (an
event of each). A node cordoned because its job area is nearly full (the disk probe critical,
alone or with the heartbeat whose write a full disk fails: ``cordoned_by="inspection (disk)"``)
is uncordoned by the inspection that finds nothing critical on it; every other cordon is lifted
by an admin only.

:meth:`NodeService.remove_node` forgets a node that is ``gone`` (an earlier virtual layout, a
machine taken out) and that no job holds; any other node is refused with the reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, undefer

from gpuyard.errors import Conflict, NotFound
from gpuyard.models import NodeState, NodeView
from gpuyard.models.access import Action
from gpuyard.models.actor import Actor
from gpuyard.models.disclosure import disclose
from gpuyard.models.events import EventKind
from gpuyard.models.health import Finding, Probe, ProbeStatus, newly_critical
from gpuyard.models.node import NodeIsolation
from gpuyard.models.states import HOLDING, LIVE
from gpuyard.services.auth import Policy
from gpuyard.services.disclosure import Viewer
from gpuyard.services.transitions import record_event
from gpuyard.services.views import to_datetime
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, NodeRow

__all__ = [
    "DISK_INSPECTION",
    "INSPECTION",
    "NodeHolder",
    "NodeService",
    "cordon_node",
    "record_inspection",
    "stored_findings",
    "uncordon_node",
]

_HOLDING = HOLDING
INSPECTION = Actor.INSPECTION
"""Who cordons a node for a critical finding (``cordoned_by``), and the actor of its events."""
DISK_INSPECTION = "inspection (disk)"
"""Who cordons a node whose job area is nearly full: the inspection lifts this cordon itself
once the disk is no longer critical (docs/node-health.md)."""


class NodeService:
    def __init__(self, store: Store, policy: Policy | None = None) -> None:
        self.store = store
        self.policy = policy

    def get_node(self, name: str, *, actor: str | None) -> NodeView:
        found = self.list_nodes(only=name, actor=actor)
        if not found:
            raise NotFound(f"node {name} does not exist (see `gpuyard nodes`)")
        return found[0]

    def list_nodes(self, *, actor: str | None, only: str | None = None) -> list[NodeView]:
        """The nodes as ``actor`` may see them: the jobs on each that it may not see are
        counted (``hidden_jobs``), not named, here and in the findings of GPU errors.
        ``actor`` None: the pool's own view (every job named)."""
        query = select(NodeRow).options(undefer(NodeRow.health)).order_by(NodeRow.name)
        if only is not None:
            query = query.where(NodeRow.name == only)
        with self.store.read() as session:
            nodes = session.scalars(query).all()
            placements = session.execute(
                select(JobRow.id, JobRow.placement).where(JobRow.state.in_(_HOLDING))
            ).all()
            viewer = Viewer.of(session, self.policy, actor)
            viewer.learn(session, [job_id for job_id, _ in placements])
            # A failed node check names its job: "check:job 7", "failed the node check of job 7".
            cordons = {
                n.name: (
                    viewer.redact(session, n.cordon_reason),
                    viewer.redact(session, n.cordoned_by),
                )
                for n in nodes
            }
            viewer.learn(
                session, [j for n in nodes for f in stored_findings(n.health) for j in f.jobs]
            )
        gpus, cpus, memory, jobs = _used(nodes, placements)
        shown = {name: disclose(ids, viewer.sees) for name, ids in jobs.items()}
        return [
            NodeView(
                name=n.name,
                address=n.address,
                state=NodeState(n.state),
                gpus=n.gpus,
                gpus_used=gpus[n.name],
                cpus=n.cpus,
                cpus_used=cpus[n.name],
                memory=n.memory,
                memory_used=memory[n.name],
                gpu_model=n.gpu_model,
                labels=n.effective_labels(),  # an admin's labels win over the executor's
                jobs=sorted(shown[n.name].shown) if n.name in shown else [],
                hidden_jobs=shown[n.name].hidden if n.name in shown else 0,
                updated_at=to_datetime(n.updated_at),
                cordon_reason=cordons[n.name][0],
                cordoned_by=cordons[n.name][1],
                cordoned_at=to_datetime(n.cordoned_at),
                health=[_disclosed(f, viewer) for f in stored_findings(n.health)],
                inspected_at=to_datetime(n.inspected_at),
                isolation=NodeIsolation.from_labels(n.effective_labels()),
            )
            for n in nodes
        ]

    def remove_node(self, name: str, *, actor: str) -> None:
        """Forget ``name`` (admins): only a gone node that no job that has not ended holds.
        A node its executor presents again comes back as new."""
        if self.policy is None:
            raise RuntimeError("NodeService.remove_node needs a policy")
        with self.store.write() as session:
            self.policy.require(session, actor, Action.MANAGE_POOL, "remove nodes")
            row = session.get(NodeRow, name)
            if row is None:
                raise NotFound(f"node {name} does not exist (see `gpuyard nodes`)")
            if row.state is not NodeState.GONE:
                raise Conflict(
                    f"node {name} is {row.state.value}, not gone: only a node no executor "
                    "presents any more can be removed"
                )
            if holding := _jobs_on(session, name):
                listed = ", ".join(map(str, holding))
                raise Conflict(
                    f"node {name} is held by job {listed}, which has not ended: remove it once "
                    f"that has (`gpuyard stop {listed}`)"
                )
            self.policy.audit.record(session, Actor.user(actor), "node.rm", f"node:{name}", "")
            session.delete(row)

    def holders(self, *, actor: str | None) -> dict[str, list[NodeHolder]]:
        """Each node's jobs now, with the GPUs (indexes) each holds there: what the nodes
        page writes in the ``1(1):application-name`` notation (docs/web.md, "Pages"). A job
        ``actor`` may not see is there with what it holds, but with neither id nor name
        (``job_id`` 0, ``name`` empty)."""
        with self.store.read() as session:
            gpu_counts = dict(session.execute(select(NodeRow.name, NodeRow.gpus)).tuples().all())
            rows = session.execute(
                select(JobRow.id, JobRow.name, JobRow.placement)
                .where(JobRow.state.in_(_HOLDING))
                .order_by(JobRow.id)
            ).all()
            viewer = Viewer.of(session, self.policy, actor)
            viewer.learn(session, [row[0] for row in rows])
        found: dict[str, list[NodeHolder]] = defaultdict(list)
        for job_id, job_name, placement in rows:
            shown_id, name = (job_id, job_name) if viewer.sees(job_id) else (0, "")
            for slot in placement or []:
                node = slot["node"]
                gpus = tuple(slot.get("gpus", ()))
                if slot.get("exclusive"):
                    gpus = tuple(range(gpu_counts.get(node, 0)))
                found[node].append(
                    NodeHolder(
                        shown_id,
                        name,
                        gpus,
                        float(slot.get("cpus", 0)),
                        bool(slot.get("exclusive")),
                    )
                )
        return dict(found)


def _jobs_on(session: Session, node: str) -> list[int]:
    """The jobs that have not ended whose placement names ``node``."""
    rows = session.execute(
        select(JobRow.id, JobRow.placement).where(JobRow.state.in_(LIVE)).order_by(JobRow.id)
    )
    return [
        job_id for job_id, placement in rows if any(s.get("node") == node for s in placement or [])
    ]


def _used(
    nodes: Sequence[NodeRow], placements: Sequence[Any]
) -> tuple[dict[str, int], dict[str, float], dict[str, int], dict[str, list[int]]]:
    """GPUs, CPUs and memory held on each node, and the ids of the jobs holding them."""
    gpus: dict[str, int] = defaultdict(int)
    cpus: dict[str, float] = defaultdict(float)
    memory: dict[str, int] = defaultdict(int)
    jobs: dict[str, list[int]] = defaultdict(list)
    capacity = {n.name: n for n in nodes}
    for job_id, placement in placements:
        for slot in placement or []:
            name = slot["node"]
            node = capacity.get(name)
            jobs[name].append(job_id)
            if slot.get("exclusive") and node is not None:
                gpus[name] += node.gpus
                cpus[name] += node.cpus
                memory[name] += node.memory
            else:
                gpus[name] += len(slot.get("gpus", ()))
                cpus[name] += float(slot.get("cpus", 0))
                memory[name] += int(slot.get("memory", 0))
    return gpus, cpus, memory, jobs


@dataclass(frozen=True)
class NodeHolder:
    """A job holding part of a node: its GPUs there (indexes into the node's GPUs). A job
    the viewer may not see has ``job_id`` 0 and no name."""

    job_id: int
    name: str
    gpus: tuple[int, ...]
    cpus: float
    exclusive: bool


def _disclosed(finding: Finding, viewer: Viewer) -> Finding:
    """``finding`` naming only the jobs ``viewer`` may see."""
    if not finding.jobs:
        return finding
    return finding.model_copy(update={"jobs": [j for j in finding.jobs if viewer.sees(j)]})


def cordon_node(session: Session, name: str, *, reason: str, by: str, now: float) -> bool:
    """Keep a node out of scheduling (its running jobs go on); False if it does not exist.
    Cordoning a cordoned node replaces the reason."""
    row = session.get(NodeRow, name)
    if row is None:
        return False
    if row.state is NodeState.READY:
        row.state = NodeState.CORDONED
    row.cordon_reason, row.cordoned_by, row.cordoned_at = reason[:500], by[:96], now
    return True


def uncordon_node(session: Session, name: str) -> bool:
    """Let the scheduler use a cordoned node again; False if it was not cordoned."""
    row = session.get(NodeRow, name)
    if row is None or (row.cordon_reason is None and row.state is not NodeState.CORDONED):
        return False
    if row.state is NodeState.CORDONED:
        row.state = NodeState.READY
    row.cordon_reason = row.cordoned_by = row.cordoned_at = None
    return True


def stored_findings(health: Sequence[Any] | None) -> list[Finding]:
    """The findings a node's ``health`` column holds; an entry that no longer parses (written
    by another version) is left out rather than failing the whole list."""
    found: list[Finding] = []
    for item in health or []:
        try:
            found.append(Finding.model_validate(item))
        except ValidationError:
            continue
    return found


def record_inspection(
    session: Session, found: Mapping[str, Sequence[Finding]], *, now: float
) -> dict[str, list[Finding]]:
    """Store each node's findings (nodes the store does not know are skipped), attribute GPU
    Xids to the jobs on that GPU, and cordon each schedulable node with a new critical
    finding. Returns the nodes cordoned, with the findings that did it. A node cordoned
    already keeps its cordon and its reason (an admin's, a failed check's): its new findings
    show in its health."""
    if not found:
        return {}
    rows = session.scalars(
        select(NodeRow).options(undefer(NodeRow.health)).where(NodeRow.name.in_(list(found)))
    ).all()
    holders: list[tuple[int, list[dict[str, Any]]]] = []
    if any(f.probe is Probe.GPU_XID and f.gpu is not None for fs in found.values() for f in fs):
        holders = [
            (job_id, list(placement or []))
            for job_id, placement in session.execute(
                select(JobRow.id, JobRow.placement).where(JobRow.state.in_(_HOLDING))
            )
        ]
    cordoned: dict[str, list[Finding]] = {}
    for row in rows:
        findings = [_attributed(f, row, holders) for f in found[row.name]]
        new = newly_critical(stored_findings(row.health), findings)
        row.health = [f.model_dump(mode="json") for f in findings]
        row.inspected_at = now
        if new and row.state is NodeState.READY:
            reason = "; ".join(f.describe() for f in new)
            # A full disk also fails the heartbeat's write: still the disk's cordon.
            disk_only = any(f.probe is Probe.DISK for f in new) and all(
                f.probe in (Probe.DISK, Probe.HEARTBEAT) for f in new
            )
            by = DISK_INSPECTION if disk_only else INSPECTION
            if disk_only:
                reason += " (the job area is nearly full; lifted when space is freed)"
            cordon_node(session, row.name, reason=f"critical {reason}", by=by, now=now)
            cordoned[row.name] = new
        elif row.cordoned_by == DISK_INSPECTION and not _critical(findings):
            uncordon_node(session, row.name)  # its own cordon, for a disk that has room again
        _tell_jobs(session, row.name, findings, now)
    return cordoned


def _critical(findings: Sequence[Finding]) -> bool:
    return any(f.status is ProbeStatus.CRITICAL for f in findings)


def _attributed(
    finding: Finding, node: NodeRow, holders: Sequence[tuple[int, list[dict[str, Any]]]]
) -> Finding:
    """An Xid of a GPU, with the jobs placed on that GPU (placements name a node's GPUs by
    their index in its ``gpu_devices``; an exclusive slot has them all)."""
    if finding.probe is not Probe.GPU_XID or finding.gpu is None or not holders:
        return finding
    devices = [str(d) for d in node.gpu_devices or []]
    if finding.gpu not in devices:
        return finding
    index = devices.index(finding.gpu)
    jobs = sorted(
        {
            job_id
            for job_id, placement in holders
            for slot in placement
            if slot.get("node") == node.name
            and (slot.get("exclusive") or index in slot.get("gpus", ()))
        }
    )
    return finding.model_copy(update={"jobs": jobs}) if jobs else finding


def _tell_jobs(session: Session, node: str, findings: Sequence[Finding], now: float) -> None:
    """An event in each job a GPU's Xid was attributed to: an application Xid is the job's to
    look at (its log says more), a node-critical one explains a failure that may follow."""
    for finding in findings:
        for job_id in finding.jobs:
            job = session.get(JobRow, job_id)
            if job is not None:
                record_event(
                    session,
                    job,
                    kind=EventKind.GPU_XID,
                    actor=INSPECTION,
                    node=node,
                    time=now,
                    reason=f"GPU {finding.gpu} of {node}: {finding.message}",
                )
