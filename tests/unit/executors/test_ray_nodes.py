"""Ray nodes as gpuyard nodes (gpuyard.executors.ray.nodes): which join, names, labels."""

from __future__ import annotations

from typing import Any

import pytest

from gpuyard.executors.ray.nodes import joins, node_info, node_name


def entry(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "NodeID": "abc123",
        "Alive": True,
        "NodeManagerAddress": "10.0.0.7",
        "Resources": {
            "CPU": 16.0,
            "GPU": 8.0,
            "memory": 64e9,
            "object_store_memory": 8e8,
            "node:10.0.0.7": 1.0,
            "accelerator_type:A100": 1.0,
            "ib": 1.0,
        },
        "Labels": {"ray.io/node-id": "abc123", "pool": "train", "zone": "rack3"},
    }
    base.update(over)
    return base


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({}, True),
        ({"Alive": False}, False),
        ({"Labels": {"gpuyard.join": "false"}}, False),
        ({"Labels": {"gpuyard.join": "true"}}, True),
    ],
)
def test_which_ray_nodes_join_the_pool(over: dict[str, Any], expected: bool) -> None:
    assert joins(entry(**over)) is expected


@pytest.mark.parametrize(
    ("labels", "expected"),
    [({}, "10.0.0.7"), ({"gpuyard.node": "gpu-17"}, "gpu-17")],
)
def test_a_node_is_named_by_its_label_else_its_address(
    labels: dict[str, str], expected: str
) -> None:
    assert node_name(entry(Labels=labels)) == expected


def test_resources_and_labels_map_to_the_pool_node() -> None:
    info = node_info(
        entry(),
        {"gpu_model": "A100", "gpu_devices": ["0", "1", "2", "3", "4", "5", "6", "7"],
         "labels": {"gpu.kind": "nvidia", "driver": "550", "isolation": "cgroup-v2"}},
    )  # fmt: skip
    assert (info.name, info.address, info.gpus, info.cpus, info.memory) == (
        "10.0.0.7", "10.0.0.7", 8, 16.0, 64_000_000_000,
    )  # fmt: skip
    assert info.gpu_model == "A100" and len(info.gpu_devices) == 8
    assert info.labels == {
        "pool": "train",
        "zone": "rack3",
        "ray.resource/ib": "1",
        "gpu.kind": "nvidia",
        "driver": "550",
        "executor": "ray",
        "ray.node_id": "abc123",
    }


def test_fractional_gpus_are_not_offered_and_devices_default_to_indices() -> None:
    info = node_info(entry(Resources={"CPU": 2.0, "GPU": 1.5, "memory": 1e9}))
    assert info.gpus == 1 and info.gpu_devices == ("0",) and info.gpu_model == ""
