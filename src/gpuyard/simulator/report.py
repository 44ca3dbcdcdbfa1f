"""Writing results: per-job CSV, summary CSV, a Rich table, the queueing-delay CDF plot."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

from gpuyard.errors import GpuyardError
from gpuyard.simulator.metrics import OVERALL, JobResult, Summary
from gpuyard.simulator.published import PUBLISHED_SUFFIX

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "CAPTION",
    "JOB_COLUMNS",
    "PlotUnavailable",
    "check_plot",
    "plot_queue_cdf",
    "summary_table",
    "write_jobs",
    "write_summary",
]

JOB_COLUMNS = (
    "policy",
    "cluster",
    "job_id",
    "gpus",
    "submit",
    "start",
    "end",
    "queue",
    "jct",
    "preemptions",
)


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def write_jobs(path: Path, results: Sequence[JobResult]) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(JOB_COLUMNS)
        for r in results:
            writer.writerow([_cell(getattr(r, c)) for c in JOB_COLUMNS])


def write_summary(path: Path, summaries: Sequence[Summary]) -> None:
    names = [f.name for f in fields(Summary)]
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=names)
        writer.writeheader()
        for s in summaries:
            row = asdict(s)
            for key in ("avg_jct", "avg_queue", "p50_queue", "p99_queue", "p999_queue", "makespan"):
                row[key] = round(row[key], 2)
            if row["alloc_waiting"] is not None:
                row["alloc_waiting"] = round(row["alloc_waiting"], 4)
            writer.writerow({k: _cell(v) for k, v in row.items()})


CAPTION = (
    "All times in seconds, over the jobs that finished. JCT: submission to end. queue: time "
    "waiting, from submission to start plus any time requeued after a preemption; p50 (the "
    "median), p99, p99.9: the queueing delay that 50 %, 99 %, 99.9 % of jobs did not exceed. "
    "alloc: share of the cluster's GPUs allocated while at least one job waited (time-"
    "weighted). makespan: first submission to last end. preempt: preemptions. policy*: "
    "published results of another simulator on the same trace, for comparison (no "
    "allocation data: -)."
)
"""The table's footnote: every column said in words, since the headers are abbreviations."""


def _seconds(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"


def summary_table(summaries: Sequence[Summary], *, title: str = "") -> Table:
    """One row per summary, grouped by cluster (overall first). Seconds throughout."""
    from rich import box
    from rich.table import Table

    clusters = {s.cluster for s in summaries}
    table = Table(
        title=title or None,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption=CAPTION,
        caption_justify="left",
    )
    headers = ["policy", "cluster", "jobs", "avg JCT", "avg queue", "p50 queue", "p99 queue"]
    headers += ["p99.9 queue"]
    headers += ["alloc", "makespan", "preempt"]
    if clusters == {OVERALL}:
        headers.remove("cluster")
    for name in headers:
        table.add_column(
            name, justify="left" if name in ("policy", "cluster") else "right", no_wrap=True
        )
    # Overall first, then cluster by cluster; inside each, ours before published, in the order
    # given (a stable sort).
    for s in sorted(summaries, key=lambda s: (s.cluster != OVERALL, s.cluster, s.published)):
        name = s.policy.removesuffix(PUBLISHED_SUFFIX) + "*" if s.published else s.policy
        cells = [f"[dim]{name}[/]" if s.published else name]
        if "cluster" in headers:
            cells.append(s.cluster)
        cells += [
            f"{s.jobs:,}" + (f" ({s.unfinished:,} unfinished)" if s.unfinished else ""),
            _seconds(s.avg_jct),
            _seconds(s.avg_queue),
            _seconds(s.p50_queue),
            _seconds(s.p99_queue),
            _seconds(s.p999_queue),
            "-" if s.alloc_waiting is None else f"{s.alloc_waiting:.1%}",
            _seconds(s.makespan),
            f"{s.preemptions:,}",
        ]
        table.add_row(*cells)
    return table


class PlotUnavailable(GpuyardError):
    """matplotlib is missing."""


def check_plot() -> None:
    """Raise :class:`PlotUnavailable` now if the plot cannot be drawn: checked before a
    replay, so that a missing matplotlib does not lose a replay's results at the end."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable(_NO_MATPLOTLIB)


_NO_MATPLOTLIB = (
    "the plot needs matplotlib: install gpuyard's 'sim' extra (pip install 'gpuyard[sim]'), "
    "or pass --no-plot"
)


def plot_queue_cdf(
    path: Path,
    ours: Mapping[str, Sequence[float]],
    published: Mapping[str, Sequence[float]] | None = None,
    *,
    title: str = "",
) -> None:
    """CDF of queueing delay per policy, log x. Published curves are dashed and say so."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable(_NO_MATPLOTLIB) from None
    figure, axes = plt.subplots(figsize=(8, 5), dpi=120)
    palette = [f"C{i}" for i in range(10)]  # the default color cycle, by name
    colors: dict[str, object] = {}  # one color per policy, ours and published alike
    for name in [*ours, *(published or {})]:
        base = name.removesuffix(PUBLISHED_SUFFIX).lower()
        colors.setdefault(base, palette[len(colors) % len(palette)])
    # Published curves first, wide, dashed and pale; ours on top, thin and solid, so that a
    # curve that reproduces a published one shows inside it.
    for group, style in (
        (published or {}, {"linestyle": "--", "linewidth": 3.0, "alpha": 0.45}),
        (ours, {"linestyle": "-", "linewidth": 1.4, "alpha": 1.0}),
    ):
        for name, delays in group.items():
            if not delays:
                continue
            xs = sorted(max(d, 1.0) for d in delays)
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            color = colors[name.removesuffix(PUBLISHED_SUFFIX).lower()]
            axes.step(xs, ys, where="post", color=color, label=name, **style)  # type: ignore[arg-type]
    axes.set_xscale("log")
    axes.set_xlabel("queueing delay (s, log scale; delays under 1 s drawn at 1 s)")
    axes.set_ylabel("fraction of jobs")
    axes.set_ylim(0, 1.0)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    if title:
        axes.set_title(title)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
