"""``gpuyard simulate``: replay a cluster trace through scheduling policies (docs/simulator.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from gpuyard.simulator.metrics import JobResult


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
            help="fifo, sjf, srtf, tiresias, gpuyard, gpuyard-blind or gpuyard-never; "
            "repeatable or comma-separated (default: all)."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Directory for jobs.csv, summary.csv, queue_cdf.png (default: a new temp "
            "dir, named at the end; never the current directory)."
        ),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(help="Trace schema: gpuyard, venus or openb (default: from the header)."),
    ] = None,
    map_: Annotated[
        list[str] | None,
        typer.Option(
            "--map",
            help="CANONICAL=COLUMN, e.g. submit_time=creation_time; repeatable. The other "
            "columns are still detected; CANONICAL= drops one.",
        ),
    ] = None,
    map_file: Annotated[
        Path | None,
        typer.Option(
            help="YAML/JSON mapping: {columns: {...}, priorities: {...}}; like --map, it "
            "names only the columns that differ from the detected schema."
        ),
    ] = None,
    cluster_preset: Annotated[
        str | None,
        typer.Option(help="Cluster schema: gpuyard, venus or openb (default: from the header)."),
    ] = None,
    overhead: Annotated[
        str,
        typer.Option(
            help="Preemption overhead in seconds: SECONDS, SMALL,LARGE (up to 8 GPUs, above) "
            "or a table GPUS:SECONDS,... such as 1:30,8:40,64:90 (jobs of up to GPUS GPUs; "
            "larger ones pay the last entry's)."
        ),
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
    from gpuyard.cli.output import err_console
    from gpuyard.errors import InvalidSpec
    from gpuyard.simulator.engine import Overhead
    from gpuyard.simulator.metrics import OVERALL
    from gpuyard.simulator.published import find_published, load_published
    from gpuyard.simulator.report import check_plot, summary_table
    from gpuyard.simulator.runner import POLICIES, default_workers
    from gpuyard.simulator.study import check_out, load, run_study, write_outputs
    from gpuyard.simulator.trace import parse_mapping

    # Every input is read and checked before anything is replayed: a replay can take
    # minutes, and an input refused after it would lose its results.
    policies = _policies(policy, list(POLICIES))
    cost = Overhead.parse(overhead)
    if workers is not None and workers < 1:
        raise InvalidSpec(f"--workers {workers}: give 1 or more processes")
    columns = parse_mapping(map_ or [])
    if plot:
        check_plot()
    out = out or _new_out_dir()
    check_out(out)
    loaded = load(
        trace,
        cluster,
        preset=preset,
        columns=columns,
        map_file=map_file,
        cluster_preset=cluster_preset,
    )
    err = err_console()

    def say(text: str) -> None:
        err.print(text, highlight=False, markup=False, soft_wrap=True)

    others: dict[str, list[JobResult]] = {}
    if published is not None and published != "none":
        others = load_published(Path(published), loaded.jobs)
        source: Path | None = Path(published)
    elif published is None and (source := find_published(trace)) is not None:
        try:
            others = load_published(source, loaded.jobs)
        except InvalidSpec as exc:  # not asked for: say why it is not shown, and go on
            say(f"not showing the published results found beside the trace: {exc.detail}")
            source = None
    else:
        source = None

    for line in loaded.report.lines():
        say(line)
    say(f"preemption overhead: {cost.describe()}")
    if source is not None:
        covered = len(next(iter(others.values()), []))
        say(
            f"published results beside ours: {source}"
            + (
                f" (they cover {covered:,} of the {len(loaded.jobs):,} jobs)"
                if covered < len(loaded.jobs)
                else ""
            )
        )

    total = len(loaded.jobs) * len(policies)
    started = time.perf_counter()
    with _progress(err, total, f"replaying {', '.join(policies)}") as advance:
        outcome = run_study(
            loaded,
            policies,
            overhead=cost,
            workers=workers or default_workers(),
            progress=advance,
            published=others,
        )
    wall = time.perf_counter() - started
    written = write_outputs(outcome, out, plot=plot, title=f"queueing delay: {trace.name}")
    rows = [s for s in outcome.summaries if per_cluster or s.cluster == OVERALL]
    _wide_console().print(summary_table(rows, title=f"{trace.name} on {cluster.name}"))
    say(
        f"replayed {len(loaded.jobs):,} jobs x {len(policies)} policies in {wall:.1f} s; "
        f"wrote {', '.join(str(p) for p in written)}"
    )


def _new_out_dir() -> Path:
    """Where the outputs go without --out: a new temp dir, never the current directory."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="gpuyard-simulation-"))


class PlainProgress:
    """Progress as plain lines, for a stderr that is not a terminal (a pipe, a log file, CI),
    where a redrawn bar would be lost or turn into garbage: a line each ``step`` percent
    and at least every ``every`` seconds, e.g.
    ``replayed 12,345/67,890 jobs (18 %), elapsed 0:42, ETA 3:10``.

    The ETA assumes the rest goes at the average rate so far. Thread-safe: :meth:`tick`
    may come from a timer while the replay calls :meth:`advance`."""

    def __init__(
        self,
        total: int,
        write: Callable[[str], None],
        *,
        every: float = 10.0,
        step: int = 5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.done = 0
        self._write = write
        self._every = every
        self._step = step
        self._clock = clock
        self._start = self._last = clock()
        self._last_step = 0
        self._written = -1
        self._lock = threading.Lock()

    def advance(self, n: int) -> None:
        with self._lock:
            self.done = min(self.total, self.done + n)
            now = self._clock()
            step = self._step_of(self.done)
            if step > self._last_step or now - self._last >= self._every:
                self._emit(now)

    def start(self) -> None:
        """The 0 % line: the replay has begun, and how many jobs it has."""
        with self._lock:
            self._emit(self._clock())

    def tick(self) -> None:
        """Time passed: a line if none was written for ``every`` seconds."""
        self.advance(0)

    def finish(self) -> None:
        with self._lock:
            if self._written != self.done:
                self._emit(self._clock())

    def line(self, now: float) -> str:
        elapsed = now - self._start
        percent = 100 * self.done // self.total if self.total else 100
        text = (
            f"replayed {self.done:,}/{self.total:,} jobs ({percent} %), "
            f"elapsed {_clock_time(elapsed)}"
        )
        if self.done >= self.total:
            return text
        if self.done == 0 or elapsed <= 0:
            return text + ", ETA unknown"
        return text + f", ETA {_clock_time(elapsed * (self.total - self.done) / self.done)}"

    def _step_of(self, done: int) -> int:
        return done * 100 // (self._step * self.total) if self.total else 0

    def _emit(self, now: float) -> None:
        self._write(self.line(now))
        self._last = now
        self._last_step = self._step_of(self.done)
        self._written = self.done


def _clock_time(seconds: float) -> str:
    """``0:42``, ``3:10``, ``1:02:03``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@contextmanager
def _progress(err: Console, total: int, label: str) -> Iterator[Callable[[int], None]]:
    """A callback that counts replayed jobs. On a terminal, a bar with the rate-based ETA
    (Rich redraws it 10 times a second, and the replay reports at every completion, so it
    moves as the replay does); elsewhere :class:`PlainProgress` lines, with a timer so that
    a line comes every 10 s even while no job finishes."""
    if err.is_terminal:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=err,
            transient=True,
        ) as bar:
            task = bar.add_task(label, total=total)
            yield lambda n: bar.advance(task, n)
        return
    lines = PlainProgress(
        total, lambda text: err.print(text, highlight=False, markup=False, soft_wrap=True)
    )
    lines.start()
    stop = threading.Event()

    def timer() -> None:
        while not stop.wait(1.0):
            lines.tick()

    thread = threading.Thread(target=timer, name="progress", daemon=True)
    thread.start()
    try:
        yield lines.advance
    finally:
        stop.set()
        thread.join()
    lines.finish()


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
