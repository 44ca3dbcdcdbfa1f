"""A job no node could ever hold is refused at submission, and where the nodes are this
machine's (the local executor's, e.g. virtual nodes of a small machine) and it is CPUs or
memory that none has, the refusal names the `gpuyard up` flag that would give them more
(issue 29, point 4). Over real HTTP, nodes registered by the real controller."""

from __future__ import annotations

import pytest

from gpuyard.client import Client
from gpuyard.controller.loop import Controller
from gpuyard.errors import InvalidSpec
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo

GiB = 1 << 30


def small_nodes(executor: str) -> FakeExecutor:
    """Two nodes as `gpuyard up --virtual-nodes 2` makes of a 2-core machine."""
    labels = {"executor": executor, "virtual": "true"}
    return FakeExecutor(
        [
            NodeInfo(f"node{i}", f"127.0.0.{i + 2}", gpus=4, cpus=1, memory=4 * GiB, labels=labels)
            for i in range(2)
        ]
    )


@pytest.fixture
def fake_executor(request: pytest.FixtureRequest) -> FakeExecutor:
    return small_nodes(getattr(request, "param", "local"))


@pytest.mark.parametrize(
    ("resources", "says"),
    [
        ({"gpus": 1, "cpus": 2}, "`gpuyard up --cpus-per-node 2`"),
        ({"cpus": 1.5, "memory": "6G"}, "`gpuyard up --cpus-per-node 1.5 --memory-per-node 6G`"),
        ({"memory": "5.5G"}, "`gpuyard up --memory-per-node 6G`"),  # rounded up, whole GiB
    ],
)
def test_the_refusal_names_the_flag_that_would_help(
    client: Client, controller: Controller, resources: dict[str, object], says: str
) -> None:
    with pytest.raises(InvalidSpec) as refused:
        client.submit({"command": "x", "nodes": 2, "resources": resources})
    message = str(refused.value)
    assert "this job can never run in this pool: no node has" in message
    assert says in message, message
    assert "0 memory" not in message and "1 GPUs" not in message
    assert client.jobs().total == 0  # refused: nothing stored


def test_no_flag_where_it_would_not_help(client: Client, controller: Controller) -> None:
    # More GPUs than any node: more CPUs would not make it fit.
    with pytest.raises(InvalidSpec) as refused:
        client.submit({"command": "x", "resources": {"gpus": 8, "cpus": 2}})
    assert "no node has 8 GPUs and 2 CPUs" in str(refused.value)
    assert "gpuyard up" not in str(refused.value)


@pytest.mark.parametrize("fake_executor", ["ray"], indirect=True)
def test_no_flag_for_nodes_of_other_machines(client: Client, controller: Controller) -> None:
    with pytest.raises(InvalidSpec) as refused:
        client.submit({"command": "x", "resources": {"cpus": 2}})
    assert "no node has 2 CPUs" in str(refused.value)
    assert "--cpus-per-node" not in str(refused.value)
