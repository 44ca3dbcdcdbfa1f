"""``sinfo``: the pool's nodes and partitions, printed as Slurm 22.05 does."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from gpuyard.models import NodeState
from gpuyard.models.request import DEFAULT_POOL
from gpuyard.slurm import render
from gpuyard.slurm.commands.base import (
    Args,
    open_client,
)
from gpuyard.slurm.records import NodeRecord, PartitionRecord

__all__ = ["sinfo"]


_SINFO_VALUED = {
    "-o": "format",
    "--format": "format",
    "-p": "partition",
    "--partition": "partition",
    "-t": "states",
    "--states": "states",
    "-n": "nodes",
    "--nodes": "nodes",
    "-M": "clusters",
    "--clusters": "clusters",
}


_SINFO_FLAGS = {
    "-h": "noheader",
    "--noheader": "noheader",
    "-N": "node",
    "--Node": "node",
    "-s": "summarize",
    "--summarize": "summarize",
    "-R": "reasons",
    "--list-reasons": "reasons",
    "--noconvert": "noconvert",
    "-a": "all",
    "--all": "all",
    "-l": "long",
    "--long": "long",
    "-e": "exact",
    "--exact": "exact",
    "-r": "responding",
    "--responding": "responding",
    "-d": "dead",
    "--dead": "dead",
}


def _node_state(state: NodeState, gpus_used: int, cpus_used: float, cpus: float) -> str:
    if state is NodeState.GONE:
        return "down"
    if state is NodeState.CORDONED:
        return "drained" if not (gpus_used or cpus_used) else "draining"
    if not gpus_used and not cpus_used:
        return "idle"
    return "allocated" if cpus_used >= cpus else "mixed"


def sinfo(args: Sequence[str], out: TextIO) -> int:
    parsed = Args(args, _SINFO_VALUED, _SINFO_FLAGS)
    with open_client() as client:
        nodes = client.nodes()
    by_pool: dict[str, list[str]] = {}
    records = []
    for node in nodes:
        pool = node.labels.get("pool") or DEFAULT_POOL
        by_pool.setdefault(pool, []).append(node.name)
        records.append(
            NodeRecord(
                name=node.name,
                partitions=(pool,),
                state=_node_state(node.state, node.gpus_used, node.cpus_used, node.cpus),
                cpus=int(node.cpus),
                cpus_alloc=int(node.cpus_used),
                memory_mb=node.memory >> 20,
                memory_alloc_mb=node.memory_used >> 20,
                gpus=node.gpus,
                gpus_alloc=node.gpus_used,
                address=node.address,
                features=tuple(f"{k}={v}" for k, v in sorted(node.labels.items())),
                reason=node.labels.get("reason", ""),
            )
        )
    partitions = [
        PartitionRecord(name=name, default=name == DEFAULT_POOL, nodes=tuple(names))
        for name, names in sorted(by_pool.items(), key=lambda kv: (kv[0] != DEFAULT_POOL, kv[0]))
    ]
    wanted = set(parsed.all("partition"))
    if wanted:
        partitions = [p for p in partitions if p.name in wanted]
    text, errors = render.render_sinfo(
        records,
        partitions,
        fmt=parsed.last("format"),
        node_oriented=parsed.has("node"),
        summarize=parsed.has("summarize"),
        reasons=parsed.has("reasons"),
        header=not parsed.has("noheader"),
    )
    for line in errors:
        print(line, file=sys.stderr)
    out.write(text)
    return 0
