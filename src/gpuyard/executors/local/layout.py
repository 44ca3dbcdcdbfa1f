"""The nodes the local executor presents: this machine whole, or split into virtual nodes.

With ``virtual_nodes=N`` the machine is presented as N nodes ``node0 … node{N-1}``, each with its
own loopback address (127.0.0.2, 127.0.0.3, …) and its own slice of GPUs, CPUs and memory, so
that multi-node jobs and gang logic run for real on one machine. When the machine has fewer
GPUs than N x gpus_per_node, the nodes present virtual GPUs (labelled ``gpu.kind=virtual``):
they are scheduled like real ones but no device stands behind them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from gpuyard.executors.local.machine import Machine
from gpuyard.models.worker import NodeInfo

__all__ = ["layout"]

_FIRST_VIRTUAL_ADDRESS = ipaddress.IPv4Address("127.0.0.2")


def layout(
    machine: Machine,
    virtual_nodes: int,
    gpus_per_node: int | None,
    cpus_per_node: float | None,
    memory_per_node: int | None,
    extra_labels: Mapping[str, str] | None = None,
) -> list[NodeInfo]:
    real = machine.gpus
    count = max(virtual_nodes, 1)
    gpus = gpus_per_node if gpus_per_node is not None else len(real) // count
    virtual_gpus = gpus * count > len(real)
    kind = "virtual" if virtual_gpus and gpus else ("nvidia" if gpus else "none")
    model = "virtual" if kind == "virtual" else (real[0].name if real and gpus else "")
    cpus = cpus_per_node if cpus_per_node is not None else max(1.0, machine.cpus / count)
    memory = memory_per_node if memory_per_node is not None else machine.memory // count
    labels = {**(extra_labels or {}), "executor": "local", "gpu.kind": kind}
    if machine.driver_version and kind == "nvidia":
        labels["driver"] = machine.driver_version
    if virtual_nodes == 0:
        devices = tuple(str(i) for i in range(gpus))
        return [
            NodeInfo(
                name=machine.hostname,
                address="127.0.0.1",
                gpus=gpus,
                cpus=cpus,
                memory=memory,
                gpu_model=model,
                gpu_devices=devices,
                labels=labels,
            )
        ]
    nodes = []
    for i in range(virtual_nodes):
        if virtual_gpus:
            devices = tuple(str(g) for g in range(gpus))
        else:
            devices = tuple(str(real[i * gpus + g].index) for g in range(gpus))
        nodes.append(
            NodeInfo(
                name=f"node{i}",
                address=str(_FIRST_VIRTUAL_ADDRESS + i),
                gpus=gpus,
                cpus=cpus,
                memory=memory,
                gpu_model=model,
                gpu_devices=devices,
                labels={**labels, "virtual": "true"},
            )
        )
    return nodes
