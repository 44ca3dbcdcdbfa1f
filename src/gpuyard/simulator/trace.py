"""Trace input: a documented CSV schema, column mappings and presets, plain or gzipped files.

The schema (canonical column names; a mapping says which column of a file holds each):

=============  ========  ==================================================================
column         needed    meaning
=============  ========  ==================================================================
job_id         yes       the job's id in the trace (any string)
submit_time    yes       seconds (any origin; integers or decimals)
gpus           yes       GPUs requested; a fraction is rounded up to whole GPUs
duration       one of    run time in seconds
end_time       these     or: ``end_time - start_time`` (``- submit_time`` without a start)
start_time     no        when the job started in the original trace (only to derive duration)
gpu_milli      no        share of each GPU in thousandths (sharing pods); rounded up
user           no        owner (default ``anonymous``)
group          no        the owner's group (default: the cluster)
cluster        no        partition the job runs in; without it every job goes to the only
                         cluster of the cluster file
nodes          no        nodes asked for (gang size), when the trace knows it
state          no        final state in the original trace (reported, never used to decide)
priority       no        tier: a number (higher goes first) or a name mapped by ``priorities``
=============  ========  ==================================================================

Rows that cannot be replayed are skipped and counted by reason (see :class:`LoadReport`): no
GPU requested, no run time known (e.g. a pod that never started), a cluster not in the cluster
file. Jobs are ordered by submit time, ties in file order: that is each job's ``seq``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuyard.errors import InvalidSpec

__all__ = [
    "COLUMNS",
    "PRESETS",
    "LoadReport",
    "TraceJob",
    "TraceSchema",
    "detect_preset",
    "load_trace",
    "open_text",
    "parse_mapping",
]

COLUMNS = (
    "job_id",
    "submit_time",
    "gpus",
    "duration",
    "start_time",
    "end_time",
    "gpu_milli",
    "user",
    "group",
    "cluster",
    "nodes",
    "state",
    "priority",
)
_REQUIRED = ("job_id", "submit_time", "gpus")

TIER_RANKS = {"low": 0, "normal": 1, "high": 2, "highest": 3}
"""gpuyard's priority tiers by rank (the order of :class:`gpuyard.models.Priority`)."""
DEFAULT_TIER = "normal"


@dataclass(frozen=True, slots=True)
class TraceSchema:
    """Where each canonical column is in a file, and how priority names map to tiers."""

    columns: Mapping[str, str]
    """Canonical name -> the file's column name."""
    priorities: Mapping[str, str] = field(default_factory=dict)
    """A priority value of the file -> a gpuyard tier name (low, normal, high, highest)."""
    name: str = "custom"

    def with_overrides(
        self, columns: Mapping[str, str], priorities: Mapping[str, str] | None = None
    ) -> TraceSchema:
        merged = {**self.columns, **columns}
        merged = {k: v for k, v in merged.items() if v}  # "--map state=" drops a column
        return TraceSchema(merged, {**self.priorities, **(priorities or {})}, self.name)


PRESETS: dict[str, TraceSchema] = {
    "gpuyard": TraceSchema({c: c for c in COLUMNS}, name="gpuyard"),
    # Helios Venus (HeliosData cluster_log.csv and the Lucid artifact's cut): one VC per row.
    "venus": TraceSchema(
        {
            "job_id": "job_id",
            "user": "user",
            "group": "vc",
            "cluster": "vc",
            "submit_time": "submit_time",
            "gpus": "gpu_num",
            "duration": "duration",
            "state": "state",
        },
        name="venus",
    ),
    # Alibaba cluster-trace-gpu-v2023 (openb) pod list: no users, QoS classes as tiers.
    "openb": TraceSchema(
        {
            "job_id": "name",
            "submit_time": "creation_time",
            "start_time": "scheduled_time",
            "end_time": "deletion_time",
            "gpus": "num_gpu",
            "gpu_milli": "gpu_milli",
            "state": "pod_phase",
            "priority": "qos",
        },
        priorities={"Guaranteed": "highest", "LS": "high", "Burstable": "normal", "BE": "low"},
        name="openb",
    ),
}


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job as the trace gives it. ``duration`` is the oracle: only the engine holds it."""

    job_id: str
    cluster: str
    user: str
    group: str
    submit: float
    gpus: int
    duration: float
    nodes: int | None = None
    state: str | None = None
    priority: int = TIER_RANKS[DEFAULT_TIER]
    requested: float | None = None
    """The GPUs asked for, when not a whole number (``gpus`` rounds it up)."""


@dataclass(slots=True)
class LoadReport:
    rows: int = 0
    jobs: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    """Reason -> rows skipped for it."""
    rounded_up: int = 0
    """Jobs whose fractional GPU request was rounded up to whole GPUs."""
    preset: str = ""

    def lines(self) -> list[str]:
        out = [f"{self.jobs} jobs replayed of {self.rows} rows (schema: {self.preset})"]
        out += [f"  skipped {n}: {reason}" for reason, n in sorted(self.skipped.items())]
        if self.rounded_up:
            out.append(f"  {self.rounded_up} fractional GPU requests rounded up to whole GPUs")
        return out


def open_text(path: Path) -> io.TextIOBase:
    """A text stream over a plain or gzipped file (told apart by its magic bytes)."""
    if not path.is_file():
        raise InvalidSpec(f"{path}: no such file")
    with path.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    if gzipped:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open("r", encoding="utf-8", newline="")


def parse_mapping(items: Sequence[str]) -> dict[str, str]:
    """``["submit_time=creation_time", ...]`` -> a canonical -> source mapping."""
    out: dict[str, str] = {}
    for item in items:
        canonical, sep, source = item.partition("=")
        canonical = canonical.strip()
        if not sep or canonical not in COLUMNS:
            raise InvalidSpec(
                f"--map {item!r}: write CANONICAL=COLUMN with CANONICAL one of "
                f"{', '.join(COLUMNS)} (e.g. submit_time=creation_time)"
            )
        out[canonical] = source.strip()
    return out


def load_schema_file(path: Path) -> TraceSchema:
    """A YAML or JSON mapping file: ``{columns: {...}, priorities: {...}}`` (or just columns)."""
    text = path.read_text(encoding="utf-8")
    data: Any
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        import yaml

        data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise InvalidSpec(f"{path}: expected a mapping of columns (and optional priorities)")
    columns = data.get("columns", data)
    priorities = data.get("priorities", {})
    if not isinstance(columns, dict) or not isinstance(priorities, dict):
        raise InvalidSpec(f"{path}: 'columns' and 'priorities' must be mappings")
    unknown = sorted(set(columns) - set(COLUMNS) - {"priorities"})
    if unknown:
        raise InvalidSpec(f"{path}: unknown columns {unknown}; known: {', '.join(COLUMNS)}")
    return TraceSchema(
        {str(k): str(v) for k, v in columns.items() if k != "priorities"},
        {str(k): str(v) for k, v in priorities.items()},
        name=path.name,
    )


def detect_preset(header: Sequence[str]) -> TraceSchema:
    """The preset whose required columns the header has; gpuyard's own schema (restricted to
    the canonical columns present) first."""
    present = set(header)
    for schema in PRESETS.values():
        needed = {schema.columns[c] for c in _REQUIRED}
        duration = {schema.columns.get("duration"), schema.columns.get("end_time")} - {None}
        if needed <= present and duration & present:
            if schema.name == "gpuyard":
                return TraceSchema({c: c for c in COLUMNS if c in present}, name="gpuyard")
            return schema
    raise InvalidSpec(
        f"cannot tell the trace's schema from its columns {list(header)}; name a preset "
        f"({', '.join(PRESETS)}) or map the columns (--map submit_time=COLUMN ...)"
    )


def load_trace(
    path: Path,
    schema: TraceSchema | None = None,
    *,
    clusters: Sequence[str] | None = None,
) -> tuple[list[TraceJob], LoadReport]:
    """Read a trace. ``schema`` None: detect it from the header. ``clusters``: the cluster
    file's partitions; jobs of others are skipped, and with exactly one, a trace without a
    cluster column goes to it."""
    with open_text(path) as stream:
        reader = csv.DictReader(stream)
        header = list(reader.fieldnames or [])
        if not header:
            raise InvalidSpec(f"{path}: empty file, no CSV header")
        schema = schema or detect_preset(header)
        _check_columns(path, schema, header)
        report = LoadReport(preset=schema.name)
        jobs = list(_jobs(path, reader, schema, report, clusters))
    jobs.sort(key=lambda j: j.submit)  # stable: ties keep file order
    report.jobs = len(jobs)
    return jobs, report


def _check_columns(path: Path, schema: TraceSchema, header: Sequence[str]) -> None:
    missing = [c for c in _REQUIRED if c not in schema.columns]
    if "duration" not in schema.columns and "end_time" not in schema.columns:
        missing.append("duration (or end_time)")
    if missing:
        raise InvalidSpec(f"the mapping names no column for {', '.join(missing)}")
    absent = {c: s for c, s in schema.columns.items() if s not in header}
    if absent:
        wrong = ", ".join(f"{c}={s}" for c, s in absent.items())
        raise InvalidSpec(
            f"{path}: no column for {wrong}; the file has {', '.join(header)} "
            f"(fix with --map CANONICAL=COLUMN, or --map CANONICAL= to drop an optional one)"
        )


class _Row:
    """One CSV row seen through the schema: values by canonical name ("" when unmapped)."""

    __slots__ = ("columns", "row")

    def __init__(self, columns: Mapping[str, str], row: Mapping[str, str | None]) -> None:
        self.columns = columns
        self.row = row

    def has(self, name: str) -> bool:
        return name in self.columns

    def get(self, name: str) -> str:
        source = self.columns.get(name)
        return (self.row.get(source) or "").strip() if source else ""

    def number(self, name: str) -> float:
        return _number(self.get(name), name)


def _jobs(
    path: Path,
    reader: csv.DictReader[str],
    schema: TraceSchema,
    report: LoadReport,
    clusters: Sequence[str] | None,
) -> Iterator[TraceJob]:
    only = clusters[0] if clusters is not None and len(clusters) == 1 else None
    known = set(clusters) if clusters is not None else None
    for line, row in enumerate(reader, start=2):
        report.rows += 1
        try:
            job = _job(_Row(schema.columns, row), schema, report, only)
        except ValueError as exc:
            raise InvalidSpec(f"{path}, line {line}: {exc}") from None
        if job is None:
            continue
        if known is not None and job.cluster not in known:
            report.skipped["cluster not in the cluster file"] += 1
            continue
        if job.requested is not None:
            report.rounded_up += 1
        yield job


def _job(
    row: _Row, schema: TraceSchema, report: LoadReport, only_cluster: str | None
) -> TraceJob | None:
    requested = row.number("gpus")
    if row.get("gpu_milli") and requested > 0:
        requested *= row.number("gpu_milli") / 1000.0
    if requested <= 0:
        report.skipped["no GPU requested"] += 1
        return None
    gpus = math.ceil(requested - 1e-9)
    submit = row.number("submit_time")
    duration = _duration(row, submit)
    if duration is None:
        report.skipped["no run time known (never started in the original trace)"] += 1
        return None
    if duration < 0:
        report.skipped["negative run time"] += 1
        return None
    cluster = row.get("cluster") or only_cluster
    if cluster is None:
        raise ValueError("no cluster column, and the cluster file has several clusters")
    nodes = row.get("nodes")
    return TraceJob(
        job_id=row.get("job_id"),
        cluster=cluster,
        user=row.get("user") or "anonymous",
        group=row.get("group") or cluster,
        submit=submit,
        gpus=gpus,
        duration=duration,
        nodes=int(_number(nodes, "nodes")) if nodes else None,
        state=row.get("state") or None,
        priority=_priority(row.get("priority"), schema),
        requested=requested if gpus != requested else None,
    )


def _duration(row: _Row, submit: float) -> float | None:
    """The run time: the duration column, else end - start, else end - submit."""
    if row.get("duration"):
        return row.number("duration")
    if not row.get("end_time"):
        return None
    if row.has("start_time"):
        if not row.get("start_time"):
            return None
        return row.number("end_time") - row.number("start_time")
    return row.number("end_time") - submit


def _number(text: str, name: str) -> float:
    if not text:
        raise ValueError(f"{name} is empty")
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name} is not a number: {text!r}") from None


def _priority(text: str, schema: TraceSchema) -> int:
    if not text:
        return TIER_RANKS[DEFAULT_TIER]
    tier = schema.priorities.get(text, text).lower()
    if tier in TIER_RANKS:
        return TIER_RANKS[tier]
    try:
        return int(float(tier))
    except ValueError:
        raise ValueError(
            f"priority {text!r} is neither a tier ({', '.join(TIER_RANKS)}) nor a number; "
            "map it with priorities: {VALUE: TIER} in a mapping file"
        ) from None
