"""Ray nodes as gpuyard nodes: which Ray nodes join the pool, their names, resources, labels.

Pure: it reads the entries of ``ray.nodes()`` (and what each node's agent said about itself)
and returns :class:`NodeInfo`, so the mapping is table-tested without a cluster.

- A Ray node joins the pool while it is alive, unless it is labelled ``gpuyard.join=false``
  (a head that should run no jobs, say).
- Its gpuyard name is its ``gpuyard.node`` label, else its IP address (Ray gives no unique
  host name: several raylets may share a host).
- GPUs, CPUs and memory are Ray's ``GPU``, ``CPU`` and ``memory`` resources; fractions of a
  GPU are not offered (gpuyard gives whole GPUs).
- Labels: the node's Ray labels, less Ray's own (``ray.io/…``) and gpuyard's (``gpuyard.…``),
  so ``pool`` and ``zone`` labels become the node's pool and network zone; each custom
  resource ``R`` with amount ``A`` becomes ``ray.resource/R=A``; and ``executor=ray``,
  ``ray.node_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuyard.models.worker import NodeInfo

__all__ = ["JOIN_LABEL", "NAME_LABEL", "joins", "node_info", "node_name"]

JOIN_LABEL = "gpuyard.join"
NAME_LABEL = "gpuyard.node"
_BUILTIN_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory", "accelerator_type"}


def _labels(entry: Mapping[str, Any]) -> dict[str, str]:
    raw = entry.get("Labels") or {}
    return {str(k): str(v) for k, v in raw.items()}


def joins(entry: Mapping[str, Any]) -> bool:
    """Whether a ``ray.nodes()`` entry is a node of the pool now."""
    return bool(entry.get("Alive")) and _labels(entry).get(JOIN_LABEL, "true") != "false"


def node_name(entry: Mapping[str, Any]) -> str:
    return _labels(entry).get(NAME_LABEL) or str(entry.get("NodeManagerAddress", ""))


def node_info(entry: Mapping[str, Any], agent: Mapping[str, Any] | None = None) -> NodeInfo:
    """The gpuyard node of a Ray node; ``agent``: what its node agent said (its ``info()``),
    for the GPU devices and model, which Ray does not know."""
    resources: Mapping[str, float] = entry.get("Resources") or {}
    gpus = int(resources.get("GPU", 0))
    labels = {k: v for k, v in _labels(entry).items() if not k.startswith(("ray.io/", "gpuyard."))}
    for key, amount in sorted(resources.items()):
        if key in _BUILTIN_RESOURCES or key.startswith(("node:", "accelerator_type:")):
            continue
        labels[f"ray.resource/{key}"] = f"{amount:g}"
    agent = agent or {}
    labels.update(
        {k: v for k, v in (agent.get("labels") or {}).items() if k in ("gpu.kind", "driver")}
    )
    labels["executor"] = "ray"
    labels["ray.node_id"] = str(entry.get("NodeID", ""))
    devices = tuple(str(d) for d in agent.get("gpu_devices") or range(gpus))[:gpus]
    return NodeInfo(
        name=node_name(entry),
        address=str(entry.get("NodeManagerAddress", "")),
        gpus=gpus,
        cpus=float(resources.get("CPU", 0.0)),
        memory=int(resources.get("memory", 0)),
        gpu_model=str(agent.get("gpu_model", "")),
        gpu_devices=devices,
        labels=labels,
    )
