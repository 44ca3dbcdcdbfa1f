"""A whole study: load a trace and its clusters, replay policies, summarise, write outputs.

Shared by ``gpuyard simulate`` and ``bench/simulate.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuyard.errors import InvalidSpec
from gpuyard.simulator.cluster import CLUSTER_PRESETS, ClusterSchema, Partition, load_cluster
from gpuyard.simulator.engine import Overhead, PartitionResult
from gpuyard.simulator.metrics import (
    JobResult,
    Occupancy,
    Summary,
    job_results,
    summarize_by_cluster,
)
from gpuyard.simulator.report import plot_queue_cdf, write_jobs, write_summary
from gpuyard.simulator.runner import Progress, replay
from gpuyard.simulator.trace import (
    PRESETS,
    LoadReport,
    TraceJob,
    TraceSchema,
    load_schema_file,
    load_trace,
)

__all__ = [
    "NEVER_FITS",
    "Loaded",
    "Outcome",
    "check_out",
    "load",
    "run_study",
    "summaries_of",
    "write_outputs",
]


@dataclass(slots=True)
class Loaded:
    partitions: list[Partition]
    jobs: list[TraceJob]
    report: LoadReport


NEVER_FITS = "can never fit its cluster, not replayed"
"""The skip reason of jobs larger than any placement on their (empty) cluster."""


def load(
    trace: Path,
    cluster: Path,
    *,
    preset: str | None = None,
    columns: dict[str, str] | None = None,
    map_file: Path | None = None,
    cluster_preset: str | None = None,
) -> Loaded:
    """Every input read and checked, so that nothing is replayed from a bad one.

    ``preset`` None: detected from the trace's header. ``map_file``, then ``columns`` (the
    ``--map`` options), go over the preset or the detected schema: they name only the
    columns that differ. Jobs that can never fit their cluster are left out and reported;
    a trace with no job left to replay is an error."""
    cluster_schema: ClusterSchema | None = None
    if cluster_preset is not None:
        if cluster_preset not in CLUSTER_PRESETS:
            raise InvalidSpec(
                f"unknown cluster preset {cluster_preset!r}; one of {', '.join(CLUSTER_PRESETS)}"
            )
        cluster_schema = CLUSTER_PRESETS[cluster_preset]
    base = _preset(preset)
    mapping = _mapping(columns, map_file)
    partitions = load_cluster(cluster, cluster_schema)
    jobs, report = load_trace(trace, base, mapping=mapping, clusters=[p.name for p in partitions])
    jobs = _fitting(jobs, {p.name: p for p in partitions}, report)
    if not jobs:
        raise InvalidSpec(
            f"{trace}: no job to replay. " + "; ".join(line.strip() for line in report.lines())
        )
    return Loaded(partitions, jobs, report)


def _preset(name: str | None) -> TraceSchema | None:
    if name is None:
        return None
    if name not in PRESETS:
        raise InvalidSpec(f"unknown preset {name!r}; one of {', '.join(PRESETS)}")
    return PRESETS[name]


def _mapping(columns: dict[str, str] | None, map_file: Path | None) -> TraceSchema | None:
    """The ``--map-file`` mapping with the ``--map`` options over it (None: neither).
    Empty sources stay: they drop a column from the schema the mapping goes over."""
    base = load_schema_file(map_file) if map_file is not None else None
    if not columns:
        return base
    if base is None:
        return TraceSchema(dict(columns), name="--map")
    return TraceSchema({**base.columns, **columns}, base.priorities, f"{base.name} + --map")


def _fitting(
    jobs: list[TraceJob], partitions: dict[str, Partition], report: LoadReport
) -> list[TraceJob]:
    kept: list[TraceJob] = []
    for job in jobs:
        why = partitions[job.cluster].never_fits(job.gpus, job.nodes)
        if why is None:
            kept.append(job)
        else:
            report.skip(NEVER_FITS, job.line, f"job {job.job_id}: {why}")
    report.jobs = len(kept)
    return kept


@dataclass(slots=True)
class Outcome:
    results: list[PartitionResult]
    jobs: list[JobResult]
    summaries: list[Summary]
    published: dict[str, list[JobResult]] = field(default_factory=dict)


def summaries_of(
    results: Sequence[PartitionResult], published: dict[str, list[JobResult]] | None = None
) -> list[Summary]:
    """Per cluster and overall, for every policy; then the published ones alike."""
    out: list[Summary] = []
    for policy in dict.fromkeys(r.policy for r in results):
        mine = [r for r in results if r.policy == policy]
        rows = [row for r in mine for row in job_results(r)]
        out += summarize_by_cluster(policy, rows, {r.partition: Occupancy.of(r) for r in mine})
    for name, rows in (published or {}).items():
        out += summarize_by_cluster(name, rows, published=True)
    return out


def run_study(
    loaded: Loaded,
    policies: Sequence[str],
    *,
    overhead: Overhead | None = None,
    workers: int = 1,
    progress: Progress | None = None,
    published: dict[str, list[JobResult]] | None = None,
) -> Outcome:
    """Replay and summarise. ``published``: :func:`load_published`'s results, loaded (and
    so checked) before this is called."""
    results = replay(
        loaded.partitions,
        loaded.jobs,
        policies,
        overhead=overhead,
        workers=workers,
        progress=progress,
    )
    others = published or {}
    jobs = [row for r in results for row in job_results(r)]
    return Outcome(results, jobs, summaries_of(results, others), others)


def check_out(out: Path) -> None:
    """Raise now if ``out`` cannot take the outputs: checked before a replay, so that its
    results are not lost at the end for want of a directory."""
    import os

    if out.exists():
        if not out.is_dir():
            raise InvalidSpec(f"--out {out}: exists and is not a directory; name a directory")
        if not os.access(out, os.W_OK | os.X_OK):
            raise InvalidSpec(f"--out {out}: not writable by you; name another directory")
        return
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidSpec(f"--out {out}: cannot create it ({parent} is not a writable directory)")


def write_outputs(outcome: Outcome, out: Path, *, plot: bool = True, title: str = "") -> list[Path]:
    """``jobs.csv``, ``summary.csv`` and ``queue_cdf.png`` in ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "jobs.csv", out / "summary.csv"]
    write_jobs(written[0], outcome.jobs)
    write_summary(written[1], outcome.summaries)
    if plot:
        ours: dict[str, list[float]] = {}
        for row in outcome.jobs:
            if row.queue is not None:
                ours.setdefault(row.policy, []).append(row.queue)
        published = {
            name: [r.queue for r in rows if r.queue is not None]
            for name, rows in outcome.published.items()
        }
        path = out / "queue_cdf.png"
        plot_queue_cdf(path, ours, published, title=title)
        written.append(path)
    return written
