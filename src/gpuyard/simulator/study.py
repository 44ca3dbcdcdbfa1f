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
from gpuyard.simulator.published import load_published
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

__all__ = ["Loaded", "Outcome", "load", "run_study", "summaries_of", "write_outputs"]


@dataclass(slots=True)
class Loaded:
    partitions: list[Partition]
    jobs: list[TraceJob]
    report: LoadReport


def load(
    trace: Path,
    cluster: Path,
    *,
    preset: str | None = None,
    columns: dict[str, str] | None = None,
    map_file: Path | None = None,
    cluster_preset: str | None = None,
) -> Loaded:
    """``preset`` None: detected from the trace's header; ``columns`` override it."""
    cluster_schema: ClusterSchema | None = None
    if cluster_preset is not None:
        if cluster_preset not in CLUSTER_PRESETS:
            raise InvalidSpec(
                f"unknown cluster preset {cluster_preset!r}; one of {', '.join(CLUSTER_PRESETS)}"
            )
        cluster_schema = CLUSTER_PRESETS[cluster_preset]
    partitions = load_cluster(cluster, cluster_schema)
    schema = _schema(trace, preset, columns, map_file)
    jobs, report = load_trace(trace, schema, clusters=[p.name for p in partitions])
    return Loaded(partitions, jobs, report)


def _schema(
    trace: Path, preset: str | None, columns: dict[str, str] | None, map_file: Path | None
) -> TraceSchema | None:
    base: TraceSchema | None = None
    if map_file is not None:
        base = load_schema_file(map_file)
    elif preset is not None:
        if preset not in PRESETS:
            raise InvalidSpec(f"unknown preset {preset!r}; one of {', '.join(PRESETS)}")
        base = PRESETS[preset]
    if not columns:
        return base
    if base is None:
        import csv

        from gpuyard.simulator.trace import detect_preset, open_text

        with open_text(trace) as stream:
            header = next(csv.reader(stream), [])
        try:
            base = detect_preset(header)
        except InvalidSpec:
            base = TraceSchema({}, name="custom")
    return base.with_overrides(columns)


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
    published: Path | None = None,
) -> Outcome:
    results = replay(
        loaded.partitions,
        loaded.jobs,
        policies,
        overhead=overhead,
        workers=workers,
        progress=progress,
    )
    others = load_published(published, loaded.jobs) if published is not None else {}
    jobs = [row for r in results for row in job_results(r)]
    return Outcome(results, jobs, summaries_of(results, others), others)


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
