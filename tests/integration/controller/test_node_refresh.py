"""Nodes that come and go (a Ray cluster's): an executor with ``node_refresh`` is read again.

The controller reads the nodes of an executor that sets ``node_refresh`` (seconds) that often
(docs/cluster.md): a node that joins is scheduled on at once, one that leaves is ``gone`` and
the next pass looks at every worker. An executor without it is read only at start.
"""

from __future__ import annotations

from sqlalchemy import select

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.node import NodeState
from gpuyard.models.worker import NodeInfo
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeRow
from gpuyard.testing.auth import OPS, ensure_ops

N0 = NodeInfo("n0", "10.0.0.1", gpus=2, cpus=8, memory=1 << 34, labels={"zone": "a"})
N1 = NodeInfo("n1", "10.0.0.2", gpus=2, cpus=8, memory=1 << 34, labels={"zone": "b"})


class ComingAndGoing(FakeExecutor):
    node_refresh = 2.0
    reads = 0

    def nodes(self) -> list[NodeInfo]:
        self.reads += 1
        return super().nodes()


def states(store: Store) -> dict[str, NodeState]:
    with store.read() as session:
        return {row.name: row.state for row in session.scalars(select(NodeRow))}


def test_a_node_that_joins_is_used_and_one_that_leaves_is_gone(
    store: Store, clock: ManualClock
) -> None:
    executor = ComingAndGoing([N0])
    controller = Controller(store, executor, clock=clock, control_url="http://cp")
    controller.register_nodes()
    jobs = JobService(store, clock=clock, notify=controller.notify)
    ensure_ops(store)
    spec = JobSpec.model_validate({"command": "x", "resources": {"gpus": 2}})
    first = jobs.submit(spec, owner="alice").id
    job = jobs.submit(spec, owner="alice").id
    controller.tick()
    assert jobs.get(first, actor=OPS).state is JobState.RUNNING
    assert jobs.get(job, actor=OPS).state is JobState.QUEUED  # n0 is full
    executor._nodes.append(N1)
    controller.tick()  # within node_refresh of the last read: not read again
    assert "n1" not in states(store)
    clock.advance(2.0)
    controller.tick()
    assert states(store) == {"n0": NodeState.READY, "n1": NodeState.READY}
    controller.tick()
    assert jobs.get(job, actor=OPS).state is JobState.RUNNING
    assert executor.launches[-1].node == "n1"
    executor._nodes.remove(N1)
    clock.advance(2.0)
    controller.tick()
    assert states(store)["n1"] is NodeState.GONE
    reads = executor.reads
    clock.advance(2.0)
    controller.tick()  # read again, unchanged: nothing written
    assert executor.reads == reads + 1 and states(store)["n1"] is NodeState.GONE


def test_an_executor_without_node_refresh_is_read_once(store: Store, clock: ManualClock) -> None:
    executor = FakeExecutor([N0])
    controller = Controller(store, executor, clock=clock, control_url="http://cp")
    controller.register_nodes()
    executor._nodes.append(N1)
    clock.advance(60.0)
    controller.tick()
    assert "n1" not in states(store)
