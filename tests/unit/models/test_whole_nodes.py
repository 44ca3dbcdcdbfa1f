"""When a job's workers take whole nodes (gpuyard.models.request.takes_whole_nodes): the
spec's `exclusive`, else whole nodes for more than one node."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuyard.models import JobSpec
from gpuyard.models.request import request_of


@pytest.mark.parametrize(
    ("nodes", "exclusive", "whole"),
    [
        (2, None, True),  # the default: a multi-node job takes its nodes whole
        (1, None, False),  # one node: a share of it
        (2, False, False),  # --shared
        (1, True, True),  # --exclusive: one whole node
        (2, True, True),
    ],
)
def test_the_spec_decides_and_the_default_depends_on_the_node_count(
    nodes: int, exclusive: bool | None, whole: bool
) -> None:
    spec = JobSpec(command="x", nodes=nodes, exclusive=exclusive, resources={"gpus": 1})
    members = request_of(spec).request.members
    assert len(members) == nodes
    assert all(m.whole_node is whole for m in members)


def test_alternatives_and_parameter_servers_follow_it() -> None:
    spec = JobSpec(
        command="x",
        mode="tensorflow",
        nodes=2,
        parameter_servers=1,
        exclusive=False,
        resources={"gpus": 2},
        alternatives=[{"gpus": 1}],
    )
    for choice in request_of(spec).choices():
        assert not any(m.whole_node for m in choice.members)


def test_an_elastic_job_takes_whole_nodes() -> None:
    with pytest.raises(ValidationError, match="exclusive: an elastic job takes whole nodes"):
        JobSpec(command="x", nodes=4, min_nodes=2, exclusive=False)
    sizes = request_of(JobSpec(command="x", nodes=3, min_nodes=1, exclusive=True)).choices()
    assert [[m.whole_node for m in c.members] for c in sizes] == [[True] * 3, [True] * 2, [True]]
