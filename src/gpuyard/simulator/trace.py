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

Two kinds of bad rows:

- a value that cannot be read (not a number, an empty required value, ``nan`` or ``inf``, a
  node count that is not a whole number, an unknown priority) is an error that names the line
  and the column: it means the file or its mapping is wrong, and a replay of what is left
  would not be the trace's;
- a row that reads fine but cannot be replayed is skipped, counted by reason, with the first
  few line numbers as examples (see :class:`LoadReport`): no GPU requested, no run time known
  (e.g. a pod that never started), a negative run time, a cluster not in the cluster file.
  :func:`gpuyard.simulator.study.load` adds the jobs that can never fit their cluster.

Jobs are ordered by submit time, ties in file order: that is each job's ``seq``.
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
    "BadValue",
    "LoadReport",
    "TraceJob",
    "TraceSchema",
    "detect_preset",
    "load_schema_file",
    "load_trace",
    "open_text",
    "parse_mapping",
    "resolve_schema",
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
    line: int = 0
    """The trace file's line (the header is line 1), for messages; 0 when not from a file."""


EXAMPLES = 3
"""Example lines kept per skip reason: enough to find the rows, short enough to print."""


@dataclass(slots=True)
class LoadReport:
    """What became of the trace's rows. Skipped rows are never silent: each reason has a
    count and the first few lines, so that a user can look at them and fix the file, the
    mapping or the cluster file."""

    rows: int = 0
    jobs: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    """Reason -> rows skipped for it."""
    examples: dict[str, list[str]] = field(default_factory=dict)
    """Reason -> the first few rows skipped for it (``line 12``, maybe with details)."""
    rounded_up: int = 0
    """Jobs whose fractional GPU request was rounded up to whole GPUs."""
    preset: str = ""

    def skip(self, reason: str, line: int, detail: str = "") -> None:
        self.skipped[reason] += 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < EXAMPLES:
            examples.append(f"line {line}" + (f" ({detail})" if detail else ""))

    def lines(self) -> list[str]:
        out = [f"{self.jobs:,} jobs to replay of {self.rows:,} rows (schema: {self.preset})"]
        for reason, n in sorted(self.skipped.items()):
            examples = ", ".join(self.examples.get(reason, []))
            more = ", ..." if n > len(self.examples.get(reason, [])) else ""
            out.append(f"  skipped {n:,}: {reason}" + (f"; {examples}{more}" if examples else ""))
        if self.rounded_up:
            out.append(f"  {self.rounded_up:,} fractional GPU requests rounded up to whole GPUs")
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
    """``["submit_time=creation_time", ...]`` -> a canonical -> source mapping. An empty
    source (``state=``) stays in the mapping: it drops that column from the detected one."""
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


_MAP_FILE_KEYS = ("columns", "priorities")


def load_schema_file(path: Path) -> TraceSchema:
    """A YAML or JSON mapping file: ``{columns: {...}, priorities: {...}}`` (or just columns).

    Like ``--map``, it names only the columns that differ from the detected schema (an
    empty value drops one). Every way the file can be wrong is an :class:`InvalidSpec` that
    says where: a traceback would not tell a user which line of their file to fix."""
    where = f"mapping file {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidSpec(f"{where}: no such file") from None
    except UnicodeDecodeError:
        raise InvalidSpec(f"{where}: not UTF-8 text; write it as YAML or JSON") from None
    except OSError as exc:
        raise InvalidSpec(f"{where}: cannot read it ({exc.strerror or exc})") from None
    data = _parse_map_text(where, path, text)
    if not isinstance(data, dict):
        raise InvalidSpec(
            f"{where}: expected a mapping such as "
            "'columns: {submit_time: Submit, gpus: ReqGPUs}' (optionally with 'priorities: "
            "{VALUE: TIER}'); got " + ("an empty file" if data is None else type(data).__name__)
        )
    if "columns" in data:
        columns, priorities = data["columns"], data.get("priorities") or {}
        extra = sorted(str(k) for k in data if k not in _MAP_FILE_KEYS)
        if extra:
            raise InvalidSpec(
                f"{where}: unknown keys {extra}; the file has 'columns' and optionally 'priorities'"
            )
    else:  # just the columns, with priorities beside them
        columns = {k: v for k, v in data.items() if k != "priorities"}
        priorities = data.get("priorities") or {}
    if not isinstance(columns, dict) or not isinstance(priorities, dict):
        raise InvalidSpec(
            f"{where}: 'columns' and 'priorities' must be mappings (NAME: VALUE), e.g. "
            "'columns: {submit_time: Submit}', 'priorities: {urgent: highest}'"
        )
    unknown = sorted(str(k) for k in columns if k not in COLUMNS)
    if unknown:
        raise InvalidSpec(f"{where}: unknown columns {unknown}; known: {', '.join(COLUMNS)}")
    mapped = {str(k): _scalar(where, f"columns.{k}", v) for k, v in columns.items()}
    tiers = {
        _scalar(where, "priorities", k): _scalar(where, f"priorities.{k}", v)
        for k, v in priorities.items()
    }
    for value, tier in tiers.items():
        if tier.lower() not in TIER_RANKS and not _is_number(tier):
            raise InvalidSpec(
                f"{where}: priorities.{value}: {tier!r} is neither a tier "
                f"({', '.join(TIER_RANKS)}) nor a number"
            )
    return TraceSchema(mapped, tiers, name=path.name)


def _parse_map_text(where: str, path: Path, text: str) -> Any:
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidSpec(
                f"{where}, line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})"
            ) from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "cannot parse it"
        raise InvalidSpec(f"{where}{at}: not valid YAML ({problem})") from None


def _scalar(where: str, key: str, value: object) -> str:
    """A column name or a priority value: text or a number; empty (``state:``) drops it."""
    if value is None:
        return ""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    raise InvalidSpec(
        f"{where}: {key} must be a column name or a value, not {type(value).__name__} ({value!r})"
    )


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _fits(schema: TraceSchema, present: set[str]) -> bool:
    needed = {schema.columns.get(c) for c in _REQUIRED}
    duration = {schema.columns.get("duration"), schema.columns.get("end_time")} - {None}
    return None not in needed and needed <= present and bool(duration & present)


def _present(header: Sequence[str]) -> TraceSchema:
    """gpuyard's own schema, restricted to the canonical columns the header has."""
    present = set(header)
    return TraceSchema({c: c for c in COLUMNS if c in present}, name="gpuyard")


def detect_preset(header: Sequence[str], mapping: TraceSchema | None = None) -> TraceSchema:
    """The preset whose required columns the header has once ``mapping`` is applied over
    it; gpuyard's own schema (restricted to the canonical columns present) first.

    A mapping names only what differs: the columns it leaves out are still detected. With
    a mapping and no preset that fits, the canonical columns present plus the mapping (the
    caller's column check then names what is missing)."""
    present = set(header)
    columns = dict(mapping.columns) if mapping is not None else {}
    priorities = dict(mapping.priorities) if mapping is not None else {}
    for schema in PRESETS.values():
        base = _present(header) if schema.name == "gpuyard" else schema
        candidate = base.with_overrides(columns, priorities)
        if _fits(candidate, present):
            return _named(candidate, base.name, mapping)
    if mapping is not None:
        return _named(_present(header).with_overrides(columns, priorities), "custom", mapping)
    raise InvalidSpec(
        f"cannot tell the trace's schema from its columns {list(header)}; name a preset "
        f"({', '.join(PRESETS)}) or map the columns (--map submit_time=COLUMN ...)"
    )


def _named(schema: TraceSchema, base: str, mapping: TraceSchema | None) -> TraceSchema:
    name = base if mapping is None else f"{base} + {mapping.name}"
    return TraceSchema(schema.columns, schema.priorities, name)


def resolve_schema(
    header: Sequence[str], preset: TraceSchema | None, mapping: TraceSchema | None
) -> TraceSchema:
    """The schema to read a file with: ``preset`` (or the one detected from the header)
    with ``mapping`` over it."""
    if preset is None:
        return detect_preset(header, mapping)
    if mapping is None:
        return preset
    return _named(preset.with_overrides(mapping.columns, mapping.priorities), preset.name, mapping)


_UNREADABLE = (csv.Error, UnicodeDecodeError, OSError, EOFError)
"""What reading a broken file raises: bad CSV, not UTF-8, a damaged or truncated gzip."""


def load_trace(
    path: Path,
    schema: TraceSchema | None = None,
    *,
    mapping: TraceSchema | None = None,
    clusters: Sequence[str] | None = None,
) -> tuple[list[TraceJob], LoadReport]:
    """Read a trace. ``schema`` None: detect it from the header; ``mapping`` (``--map``,
    ``--map-file``) goes over it. ``clusters``: the cluster file's partitions; jobs of
    others are skipped, and with exactly one, a trace without a cluster column goes to it."""
    with open_text(path) as stream:
        reader = csv.DictReader(stream)
        try:
            header = list(reader.fieldnames or [])
        except _UNREADABLE as exc:
            raise InvalidSpec(f"{path}: cannot read it as CSV text ({exc})") from None
        if not header:
            raise InvalidSpec(f"{path}: empty file, no CSV header")
        schema = resolve_schema(header, schema, mapping)
        _check_columns(path, schema, header)
        only = _only_cluster(path, schema, clusters)
        report = LoadReport(preset=schema.name)
        jobs = list(_jobs(path, reader, schema, report, clusters, only))
    jobs.sort(key=lambda j: j.submit)  # stable: ties keep file order
    report.jobs = len(jobs)
    return jobs, report


def _check_columns(path: Path, schema: TraceSchema, header: Sequence[str]) -> None:
    # A mapping to a column the file lacks first: it is the likelier mistake, and fixing it
    # may supply a missing column too.
    absent = {c: s for c, s in schema.columns.items() if s not in header}
    if absent:
        wrong = ", ".join(f"{c}={s}" for c, s in absent.items())
        raise InvalidSpec(
            f"{path}: no column for {wrong}; the file has {', '.join(header)} "
            f"(fix with --map CANONICAL=COLUMN, or --map CANONICAL= to drop an optional one)"
        )
    missing = [c for c in _REQUIRED if c not in schema.columns]
    if "duration" not in schema.columns and "end_time" not in schema.columns:
        missing.append("duration (or end_time)")
    if missing:
        raise InvalidSpec(
            f"{path}: the mapping (schema {schema.name}) names no column for "
            f"{', '.join(missing)}; the file has {', '.join(header)} "
            "(map one with --map CANONICAL=COLUMN)"
        )


def _only_cluster(path: Path, schema: TraceSchema, clusters: Sequence[str] | None) -> str | None:
    """The cluster of rows that name none: the cluster file's only one. A trace without a
    cluster column needs one, which is known before any row is read."""
    only = clusters[0] if clusters is not None and len(clusters) == 1 else None
    if only is None and "cluster" not in schema.columns:
        given = (
            f" and the cluster file has {len(clusters)} clusters ({', '.join(clusters)})"
            if clusters
            else ""
        )
        raise InvalidSpec(
            f"{path}: the trace has no cluster column{given}: map the column that says where "
            "each job runs (--map cluster=COLUMN), or give a cluster file with one cluster"
        )
    return only


class BadValue(ValueError):
    """A value of a row that cannot be read; ``column`` is the canonical name."""

    def __init__(self, column: str, message: str) -> None:
        super().__init__(message)
        self.column = column


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


def _where(path: Path, line: int, schema: TraceSchema, column: str | None) -> str:
    if column is None:
        return f"{path}, line {line}"
    source = schema.columns.get(column, column)
    named = repr(source) if source == column else f"{source!r} ({column})"
    return f"{path}, line {line}, column {named}"


def _jobs(
    path: Path,
    reader: csv.DictReader[str],
    schema: TraceSchema,
    report: LoadReport,
    clusters: Sequence[str] | None,
    only: str | None,
) -> Iterator[TraceJob]:
    known = set(clusters) if clusters is not None else None
    line = 1
    try:
        for row in reader:
            line = reader.line_num  # a quoted value may span lines: the row's last line
            report.rows += 1
            try:
                job = _job(_Row(schema.columns, row), schema, report, only, line)
            except BadValue as exc:
                raise InvalidSpec(f"{_where(path, line, schema, exc.column)}: {exc}") from None
            if job is None:
                continue
            if known is not None and job.cluster not in known:
                report.skip("cluster not in the cluster file", line, job.cluster)
                continue
            if job.requested is not None:
                report.rounded_up += 1
            yield job
    except _UNREADABLE as exc:
        raise InvalidSpec(f"{path}, after line {line}: cannot read the CSV ({exc})") from None


def _job(
    row: _Row, schema: TraceSchema, report: LoadReport, only_cluster: str | None, line: int
) -> TraceJob | None:
    requested = row.number("gpus")
    if row.get("gpu_milli") and requested > 0:
        requested *= row.number("gpu_milli") / 1000.0
    if requested <= 0:
        report.skip("no GPU requested", line)
        return None
    gpus = math.ceil(requested - 1e-9)
    submit = row.number("submit_time")
    duration = _duration(row, submit)
    if duration is None:
        report.skip("no run time known (never started in the original trace)", line)
        return None
    if duration < 0:
        report.skip(f"negative run time ({_run_time_source(row)})", line, f"{duration:g} s")
        return None
    cluster = row.get("cluster") or only_cluster
    if cluster is None:
        raise BadValue("cluster", "empty; the cluster file has several clusters")
    nodes = _nodes(row.get("nodes"))
    return TraceJob(
        job_id=row.get("job_id"),
        cluster=cluster,
        user=row.get("user") or "anonymous",
        group=row.get("group") or cluster,
        submit=submit,
        gpus=gpus,
        duration=duration,
        nodes=nodes,
        state=row.get("state") or None,
        priority=_priority(row.get("priority"), schema),
        requested=requested if gpus != requested else None,
        line=line,
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


def _run_time_source(row: _Row) -> str:
    if row.get("duration"):
        return f"{row.columns['duration']} < 0"
    before = "start_time" if row.has("start_time") else "submit_time"
    return f"{row.columns['end_time']} before {row.columns[before]}"


def _nodes(text: str) -> int | None:
    if not text:
        return None
    value = _number(text, "nodes")
    if value < 1 or not value.is_integer():
        raise BadValue("nodes", f"not a whole number of nodes of at least 1: {text!r}")
    return int(value)


def _number(text: str, name: str) -> float:
    if not text:
        raise BadValue(name, "empty")
    try:
        value = float(text)
    except ValueError:
        raise BadValue(name, f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise BadValue(name, f"not a finite number: {text!r}")
    return value


def _priority(text: str, schema: TraceSchema) -> int:
    if not text:
        return TIER_RANKS[DEFAULT_TIER]
    tier = schema.priorities.get(text, text).lower()
    if tier in TIER_RANKS:
        return TIER_RANKS[tier]
    if _is_number(tier):
        return int(float(tier))
    raise BadValue(
        "priority",
        f"{text!r} is neither a tier ({', '.join(TIER_RANKS)}) nor a number; "
        "map it with priorities: {VALUE: TIER} in a mapping file (--map-file)",
    )
