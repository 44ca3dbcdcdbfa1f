"""Nodes with what is used and free on each."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuyard.models import NodeState, NodeView
from gpuyard.models.states import HOLDING
from gpuyard.services.views import to_datetime
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, NodeRow

__all__ = ["NodeService", "cordon_node", "uncordon_node"]

_HOLDING = HOLDING


class NodeService:
    def __init__(self, store: Store) -> None:
        self.store = store

    def list_nodes(self) -> list[NodeView]:
        with self.store.read() as session:
            nodes = session.scalars(select(NodeRow).order_by(NodeRow.name)).all()
            placements = session.execute(
                select(JobRow.id, JobRow.placement).where(JobRow.state.in_(_HOLDING))
            ).all()
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
                jobs=sorted(jobs[n.name]),
                updated_at=to_datetime(n.updated_at),
                cordon_reason=n.cordon_reason,
                cordoned_by=n.cordoned_by,
                cordoned_at=to_datetime(n.cordoned_at),
            )
            for n in nodes
        ]


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
