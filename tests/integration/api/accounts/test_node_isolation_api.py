"""What each node enforces for its workers (issue 24, point 12), from its executor's labels to
``/api/v1/nodes``, stored on both databases."""

from __future__ import annotations

import pytest

from gpuyard.client import Client
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.node import IsolationMode, KillMethod, NodeIsolation
from gpuyard.models.worker import NodeInfo

V2_MEMORY_ONLY = NodeIsolation(
    mode=IsolationMode.CGROUP_V2,
    enforced=["memory"],
    kill=KillMethod.CGROUP_KILL,
    memory_ceiling=64 << 30,
)


@pytest.fixture
def fake_executor() -> FakeExecutor:
    labels = V2_MEMORY_ONLY.to_labels()
    return FakeExecutor(
        [
            NodeInfo("n0", "127.0.0.10", gpus=8, cpus=32, memory=256 << 30, labels=labels),
            NodeInfo("n1", "127.0.0.11", gpus=8, cpus=32, memory=256 << 30),
        ]
    )


def test_the_nodes_view_says_what_each_node_enforces(
    client: Client, controller: Controller
) -> None:
    nodes = {n.name: n for n in client.nodes()}
    assert nodes["n0"].isolation == V2_MEMORY_ONLY
    assert nodes["n0"].isolation.not_enforced == ["pids", "cpu"]
    assert nodes["n1"].isolation is None  # an executor that does not say
