"""``gpuyard simulate``: replay a cluster trace through scheduling policies (docs/simulator.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from gpuyard.simulator.engine import Overhead


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def simulate(
    trace: Annotated[
        Path, typer.Option(help="Job trace, CSV or CSV.gz (schema: docs/simulator.md).")
    ],
    cluster: Annotated[
        Path, typer.Option(help="Cluster file: node classes per cluster, CSV or CSV.gz.")
    ],
    policy: Annotated[
        list[str] | None,
        typer.Option(
            help="fifo, sjf, gpuyard or gpuyard-never; repeatable or comma-separated "
            "(default: all)."
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="Directory for jobs.csv, summary.csv, queue_cdf.png.")
    ] = Path("simulation"),
    preset: Annotated[
        str | None,
        typer.Option(help="Trace schema: gpuyard, venus or openb (default: from the header)."),
    ] = None,
    map_: Annotated[
        list[str] | None,
        typer.Option("--map", help="CANONICAL=COLUMN, e.g. submit_time=creation_time; repeatable."),
    ] = None,
    map_file: Annotated[
        Path | None,
        typer.Option(help="YAML/JSON mapping: {columns: {...}, priorities: {...}}."),
    ] = None,
    cluster_preset: Annotated[
        str | None,
        typer.Option(help="Cluster schema: gpuyard, venus or openb (default: from the header)."),
    ] = None,
    overhead: Annotated[
        str,
        typer.Option(help="Preemption overhead, SECONDS or SMALL,LARGE (up to 8 GPUs, more)."),
    ] = "40,60",
    published: Annotated[
        str | None,
        typer.Option(
            help="Published per-job results to show beside ours (default: a "
            "*reference_results.csv* beside the trace; 'none': no)."
        ),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Worker processes (default: one per CPU).")
    ] = None,
    plot: Annotated[bool, typer.Option("--plot/--no-plot", help="Write queue_cdf.png.")] = True,
    per_cluster: Annotated[
        bool, typer.Option("--per-cluster", help="Print a row per cluster too.")
    ] = False,
) -> None:
    """Replay a job trace on a simulated cluster under each policy; report JCT, queueing
    delay, GPU allocation while jobs wait, makespan and preemptions."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from gpuyard.cli.output import err_console
    from gpuyard.simulator.metrics import OVERALL
    from gpuyard.simulator.published import find_published
    from gpuyard.simulator.report import summary_table
    from gpuyard.simulator.runner import POLICIES, default_workers
    from gpuyard.simulator.study import load, run_study, write_outputs
    from gpuyard.simulator.trace import parse_mapping

    policies = _policies(policy, list(POLICIES))
    cost = _overhead(overhead)
    loaded = load(
        trace,
        cluster,
        preset=preset,
        columns=parse_mapping(map_ or []),
        map_file=map_file,
        cluster_preset=cluster_preset,
    )
    err = err_console()
    for line in loaded.report.lines():
        err.print(line, highlight=False, markup=False)
    others = None if published == "none" else (Path(published) if published else None)
    if published is None:
        others = find_published(trace)
    if others is not None:
        err.print(f"published results beside ours: {others}", highlight=False, markup=False)

    total = len(loaded.jobs) * len(policies)
    started = time.perf_counter()
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(f"replaying {', '.join(policies)}", total=total)
        outcome = run_study(
            loaded,
            policies,
            overhead=cost,
            workers=workers or default_workers(),
            progress=lambda n: bar.advance(task, n),
            published=others,
        )
    wall = time.perf_counter() - started
    written = write_outputs(outcome, out, plot=plot, title=f"queueing delay: {trace.name}")
    rows = [s for s in outcome.summaries if per_cluster or s.cluster == OVERALL]
    _wide_console().print(summary_table(rows, title=f"{trace.name} on {cluster.name}"))
    err.print(
        f"replayed {len(loaded.jobs):,} jobs x {len(policies)} policies in {wall:.1f} s; "
        f"wrote {', '.join(str(p) for p in written)}",
        highlight=False,
        markup=False,
    )


def _wide_console() -> Console:
    """stdout; 120 columns when it is not a terminal (Rich would wrap the table at 80)."""
    import sys

    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=120)


def _policies(given: list[str] | None, known: list[str]) -> list[str]:
    from gpuyard.errors import InvalidSpec

    names = [n.strip() for item in (given or known) for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidSpec(f"unknown policy {unknown[0]!r}; choose from {', '.join(known)}")
    return list(dict.fromkeys(names))


def _overhead(text: str) -> Overhead:
    from gpuyard.errors import InvalidSpec
    from gpuyard.simulator.engine import Overhead

    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or any(p < 0 for p in parts):
        raise InvalidSpec(
            f"--overhead {text!r}: give SECONDS or SMALL,LARGE (e.g. 40,60), not negative"
        )
    return Overhead(parts[0], parts[-1])
