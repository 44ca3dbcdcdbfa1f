"""Cluster input: node classes per cluster (partition), from a CSV file.

The schema (canonical names, mapped like the trace's):

================  ========  ============================================================
column            needed    meaning
================  ========  ============================================================
gpus_per_node     yes       GPUs of each node of the class (rows with 0 are ignored)
num_nodes         no        nodes of the class (default 1: one row per node)
cluster           no        the partition (a Venus VC); default: one cluster
node_class        no        GPU model or any class name (default ``default``)
================  ========  ============================================================

Each cluster is an independent partition: no job uses GPUs of two clusters, as each Venus VC
in the artifacts. Rows of the same (cluster, class, GPUs) add up, so a per-node list (openb's
node list) and a per-class table (``venus_vc_config.csv``) both load. Nodes keep file order,
which placement uses to break ties.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuyard.errors import InvalidSpec
from gpuyard.simulator.trace import open_text

__all__ = [
    "CLUSTER_PRESETS",
    "ClusterSchema",
    "Node",
    "NodeClass",
    "Partition",
    "load_cluster",
]

CLUSTER_COLUMNS = ("cluster", "node_class", "num_nodes", "gpus_per_node")


@dataclass(frozen=True, slots=True)
class ClusterSchema:
    columns: Mapping[str, str]
    default_cluster: str = "default"
    """The cluster's name when the file has no cluster column."""
    name: str = "custom"


CLUSTER_PRESETS: dict[str, ClusterSchema] = {
    "gpuyard": ClusterSchema({c: c for c in CLUSTER_COLUMNS}, name="gpuyard"),
    "venus": ClusterSchema(
        {"cluster": "vc", "num_nodes": "num_nodes", "gpus_per_node": "gpus_per_node"},
        name="venus",
    ),
    "openb": ClusterSchema(
        {"node_class": "model", "gpus_per_node": "gpu"}, default_cluster="openb", name="openb"
    ),
}


@dataclass(frozen=True, slots=True)
class NodeClass:
    name: str
    count: int
    gpus: int


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    node_class: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Partition:
    """One cluster: its node classes and the nodes they expand to, in a fixed order."""

    name: str
    classes: tuple[NodeClass, ...]

    @property
    def nodes(self) -> tuple[Node, ...]:
        many = len(self.classes) > 1 or self.classes[0].name != "default"
        out: list[Node] = []
        for cls in self.classes:
            prefix = f"{cls.name}-{cls.gpus}g" if many else "node"
            out += [Node(f"{prefix}-{i}", cls.name, cls.gpus) for i in range(cls.count)]
        return tuple(out)

    @property
    def gpus(self) -> int:
        return sum(c.count * c.gpus for c in self.classes)

    @property
    def largest_node(self) -> int:
        return max(c.gpus for c in self.classes)

    def never_fits(self, gpus: int, nodes: int | None = None) -> str | None:
        """Why a job of ``gpus`` GPUs (on ``nodes`` nodes, when the trace says) can never
        start here, even on the empty partition; None if it can.

        The request is the one both policies place (see
        :func:`gpuyard.simulator.gpuyard_policy.request_for`): up to the largest node, one
        node; above, whole nodes of the largest size plus one member for the remainder; with
        a node count that divides the GPUs, that many equal members. Such a job would wait
        forever, and under FIFO block its whole cluster behind it."""
        if gpus > self.gpus:
            return f"{gpus} GPUs; {self.name} has {self.gpus}"
        largest = self.largest_node
        if nodes is not None and nodes > 1 and gpus % nodes == 0:
            per = gpus // nodes
            fit = sum(c.count for c in self.classes if c.gpus >= per)
            if fit < nodes:
                return f"{nodes} nodes of {per} GPUs; {self.name} has {fit} such nodes"
            return None
        if gpus <= largest:
            return None
        whole, rest = divmod(gpus, largest)
        big = sum(c.count for c in self.classes if c.gpus == largest)
        spare = big > whole or any(c.gpus >= rest for c in self.classes if c.gpus != largest)
        if big < whole or (rest and not spare):
            return (
                f"{gpus} GPUs as {whole} whole {largest}-GPU nodes"
                + (f" plus {rest} GPUs on another" if rest else "")
                + f"; {self.name} has {big} nodes of {largest} GPUs"
            )
        return None

    @classmethod
    def uniform(cls, name: str, nodes: int, gpus_per_node: int = 8) -> Partition:
        return cls(name, (NodeClass("default", nodes, gpus_per_node),))


def detect_cluster_preset(header: Sequence[str]) -> ClusterSchema:
    """A preset whose columns the header has; else gpuyard's schema with the columns there."""
    present = set(header)
    for name, schema in CLUSTER_PRESETS.items():
        if name != "gpuyard" and set(schema.columns.values()) <= present:
            return schema
    if "gpus_per_node" in present:
        return ClusterSchema({c: c for c in CLUSTER_COLUMNS if c in present}, name="gpuyard")
    raise InvalidSpec(
        f"cannot tell the cluster file's schema from its columns {list(header)}; it needs "
        f"gpus_per_node (and optionally cluster, node_class, num_nodes), or a preset "
        f"({', '.join(CLUSTER_PRESETS)})"
    )


def load_cluster(path: Path, schema: ClusterSchema | None = None) -> list[Partition]:
    """The partitions of a cluster file, in order of first appearance."""
    counts: dict[str, dict[tuple[str, int], int]] = {}
    line = 1
    with open_text(path) as stream:
        try:
            reader = csv.DictReader(stream)
            header = list(reader.fieldnames or [])
            if not header:
                raise InvalidSpec(f"{path}: empty file, no CSV header")
            schema = schema or detect_cluster_preset(header)
            absent = [s for s in schema.columns.values() if s not in header]
            if "gpus_per_node" not in schema.columns or absent:
                raise InvalidSpec(
                    f"{path}: the cluster schema {schema.name!r} needs columns "
                    f"{sorted(schema.columns.values())}; the file has {header}"
                )
            for row in reader:
                line = reader.line_num
                cluster, node_class, nodes, gpus = _row(path, line, row, schema)
                if gpus == 0 or nodes == 0:
                    continue
                per = counts.setdefault(cluster, {})
                per[(node_class, gpus)] = per.get((node_class, gpus), 0) + nodes
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise InvalidSpec(f"{path}, after line {line}: cannot read the CSV ({exc})") from None
    if not counts:
        raise InvalidSpec(f"{path}: no nodes with GPUs (every row has 0 GPUs or 0 nodes)")
    return [
        Partition(name, tuple(NodeClass(c, n, g) for (c, g), n in classes.items()))
        for name, classes in counts.items()
    ]


def _row(
    path: Path, line: int, row: Mapping[str, str | None], schema: ClusterSchema
) -> tuple[str, str, int, int]:
    def get(name: str) -> str:
        source = schema.columns.get(name)
        return (row.get(source) or "").strip() if source else ""

    def count(name: str, default: str) -> int:
        text = get(name) or default
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            source = schema.columns.get(name, name)
            column = repr(source) if source == name else f"{source!r} ({name})"
            what = "empty" if not text else f"{text!r} is not a whole number of 0 or more"
            raise InvalidSpec(f"{path}, line {line}, column {column}: {what}")
        return value

    gpus = count("gpus_per_node", "")
    nodes = count("num_nodes", "1")
    return get("cluster") or schema.default_cluster, get("node_class") or "default", nodes, gpus
