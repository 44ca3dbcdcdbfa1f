"""``gpuyard top``: a live view of the nodes and the busiest running jobs.

Each frame is two requests (``/nodes`` for what is allocated and cordoned, ``/usage`` for what
is used) drawn by :func:`render`, a pure function of what they returned; ``--once`` prints one
frame and exits, for scripts and tests. ``q`` or Ctrl-C leaves, and the terminal is given back
as it was.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import RenderableType

    from gpuyard.client import Client
    from gpuyard.models import NodeView
    from gpuyard.models.usage import PoolUsage

__all__ = ["register", "render", "top"]


def register(app: typer.Typer) -> None:
    app.command()(top)


def top(
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", "-n", min=0.5, help="Seconds between frames.")
    ] = 2.0,
    jobs: Annotated[int, typer.Option("--jobs", min=1, max=1000, help="Most jobs shown.")] = 15,
) -> None:
    """Nodes (GPUs allocated, CPU, memory and GPUs in use, state) and the busiest running
    jobs you may view, redrawn every --interval seconds; q or Ctrl-C leaves. The pool
    samples usage on its own period (GPUYARD_USAGE_INTERVAL), which the header shows."""
    from gpuyard.cli.output import console
    from gpuyard.client import Client

    client = Client()
    if once or not sys.stdout.isatty():  # into a pipe or a file: one frame, as with --once
        console().print(_frame(client, jobs))
        return
    with contextlib.suppress(KeyboardInterrupt):
        _watch(client, interval, jobs)


def _frame(client: Client, jobs: int) -> RenderableType:
    return render(client.nodes(), client.usage(limit=jobs), at=datetime.now(UTC))


def _live_frame(client: Client, jobs: int, interval: float) -> RenderableType:
    return render(client.nodes(), client.usage(limit=jobs), at=datetime.now(UTC), redraw=interval)


def _watch(client: Client, interval: float, jobs: int) -> None:
    import signal

    from rich.live import Live

    from gpuyard.cli.output import console

    # Ctrl-C only asks to leave: raised in the middle of a request or of a frame being written,
    # KeyboardInterrupt could leave the terminal half drawn; the loop leaves at its next look.
    leave = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: leave.set())
    try:
        with (
            _keys() as pressed,
            Live(
                _live_frame(client, jobs, interval),
                console=console(),
                screen=True,
                auto_refresh=False,
            ) as live,
        ):
            while not leave.is_set() and _wait(pressed, interval, leave) not in ("q", "Q"):
                if not leave.is_set():
                    live.update(_live_frame(client, jobs, interval), refresh=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def _wait(
    pressed: Callable[[float], str | None], interval: float, leave: threading.Event
) -> str | None:
    """The key pressed within ``interval`` seconds, looking for Ctrl-C every 0.1 s."""
    import time

    end = time.monotonic() + interval
    while (left := end - time.monotonic()) > 0 and not leave.is_set():
        key = pressed(min(left, 0.1))
        if key is not None:
            return key
    return None


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str | None]]:
    """A function that waits up to its argument in seconds for a key and returns it (None when
    none came); the terminal reads keys one at a time meanwhile, and is restored after."""
    import select
    import time

    if not sys.stdin.isatty():

        def wait(timeout: float) -> str | None:
            time.sleep(timeout)
            return None

        yield wait
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def key(timeout: float) -> str | None:
        ready, _, _ = select.select([fd], [], [], timeout)
        return sys.stdin.read(1) if ready else None

    try:
        yield key
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


# -- one frame --------------------------------------------------------------------------------


def render(
    nodes: Sequence[NodeView], usage: PoolUsage, *, at: datetime, redraw: float | None = None
) -> RenderableType:
    """One frame: a header, the nodes, the busiest jobs. A figure that was not measured (GPUs
    without a driver, a job not sampled yet) shows as ``-``. ``redraw``: the seconds between
    frames of a live view (None: a single frame, which has no key to quit)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from gpuyard.models.holding import gpus_text
    from gpuyard.models.usage import NodeNow
    from gpuyard.quantities import format_bytes

    def of(value: float | None, fmt: Callable[[float], str]) -> str:
        return "-" if value is None else fmt(value)

    def size(value: float | None) -> str:
        return of(value, lambda v: format_bytes(int(v)))

    now = {n.name: n for n in usage.nodes}
    gpus = sum(n.gpus for n in nodes if n.state.value != "gone")
    held = sum(n.gpus_used for n in nodes if n.state.value != "gone")
    header = Text(
        f"gpuyard top  {at.astimezone().strftime('%H:%M:%S')}  nodes {len(nodes)}  "
        f"GPUs {held}/{gpus} allocated  running jobs shown {len(usage.jobs)}  "
        f"(usage sampled every {usage.interval:g}s"
        + (f", redrawn every {redraw:g}s; q to quit)" if redraw else ")")
    )
    node_table = Table(
        "NODE", "STATE", "GPUS", "GPU%", "GPU MEM", "CPU", "MEMORY", "JOBS", box=None
    )
    for n in nodes:
        u = now.get(n.name) or NodeNow(name=n.name)
        state = n.state.value + (f" ({n.cordon_reason})" if n.cordon_reason else "")
        node_table.add_row(
            n.name,
            state,
            f"{n.gpus_used}/{n.gpus}",
            of(u.gpu_util, lambda v: f"{v:.0f}%"),
            size(u.gpu_memory),
            f"{of(u.cpu, lambda v: f'{v:.1f}')}/{n.cpus:g}",
            f"{size(u.memory)}/{format_bytes(n.memory)}",
            str(len(n.jobs)),
        )
    job_table = Table(
        "ID", "OWNER", "NAME", "NODES", "GPUS", "CPU", "MEMORY", "GPU%", "GPU MEM", box=None
    )
    for j in usage.jobs:
        job_table.add_row(
            str(j.id),
            j.owner,
            j.name,
            ",".join(j.nodes) or "-",
            gpus_text(j.gpus, j.held_gpus),
            of(j.cpu, lambda v: f"{v:.2f}"),
            size(j.memory),
            of(j.gpu_util, lambda v: f"{v:.0f}%"),
            size(j.gpu_memory),
        )
    parts: list[RenderableType] = [header, Text(""), node_table, Text("")]
    parts.append(job_table if usage.jobs else Text("no running jobs you may view"))
    return Group(*parts)
