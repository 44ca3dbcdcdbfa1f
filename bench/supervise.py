"""Benchmark: what it costs the pool to supervise many idle workers, and how soon it notices
that one has exited, each beside a floor measured in the same run.

What is measured, and how
-------------------------
The local executor is driven directly (no server, no controller) in a fresh temporary home;
nothing of the user's own pool is touched.

1. **Idle supervision**. ``--workers`` workers run ``sleep 3600``, each under its supervisor (and
   in its cgroup where the machine has one). Once every supervisor has said it started, for
   ``--seconds``:

   - *supervisors*: the CPU time (user + system) all supervisor processes used together, from
     ``psutil`` before and after, as a percentage of one core; and how many times they were
     woken (voluntary context switches): an idle supervisor should never wake up;
   - *status polling*: ``executor.status()`` on every handle every ``--interval`` seconds, as
     the controller does, timed with this thread's CPU clock: percentage of one core, and the
     cost per call and per handle.

   Memory: RSS, PSS and USS of the supervisors (``psutil.memory_full_info``, from smaps).

2. **Exit notice latency**. While the idle workers run, ``--exits`` more workers run
   ``sh -c 'sleep X; exec date +%s.%N'`` with X staggered by 50 ms: ``date`` prints the time and
   is the command's last act. The latency is from that time to the executor's wake-up callback
   firing with the worker's key (the supervisor kills the cgroup, writes the exit record,
   pokes, exits; the executor waits for that exit before it calls back). The callback also
   asks ``status`` for that worker, to check that the exit is believed at once.

Baselines, measured first (so that nothing of the pool competes with them): ``--workers`` plain
``sleep 3600`` processes started with ``subprocess.Popen`` (their CPU, wake-ups and memory, and
an ``os.kill(pid, 0)`` liveness poll of all of them at the same interval), and the exit latency
of the same staggered commands started with Popen, noticed by a thread blocked in ``poll`` on
their pidfds (the floor: the kernel telling a waiting process).

No figure is asserted. Every process started is ended on the way out, Ctrl-C included. Run it
as ``.venv/bin/python bench/supervise.py`` (``--workers 100`` for a quick look).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
EXIT_STAGGER = 0.05
"""Seconds between two exits in the latency run."""


# -- figures ----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Idle:
    """What N idle processes cost over a window."""

    processes: int
    seconds: float
    cpu_seconds: float
    wakeups: int
    rss: int
    pss: int
    uss: int

    @property
    def core_percent(self) -> float:
        return 100 * self.cpu_seconds / self.seconds


@dataclass(frozen=True)
class Poll:
    """What polling N workers' liveness every interval cost this thread."""

    handles: int
    calls: int
    seconds: float
    cpu_seconds: float
    wall_per_call: list[float]

    @property
    def core_percent(self) -> float:
        return 100 * self.cpu_seconds / self.seconds

    @property
    def per_handle_us(self) -> float:
        return 1e6 * self.cpu_seconds / (self.calls * self.handles) if self.calls else 0.0


@dataclass(frozen=True)
class Latency:
    samples: list[float]
    believed: int = 0
    """Callbacks after which status() already said EXITED."""

    def ms(self, q: float) -> float:
        return 1000 * percentile(self.samples, q) if self.samples else float("nan")


def cpu_and_wakeups(procs: Sequence[psutil.Process]) -> tuple[float, int]:
    cpu, wakeups = 0.0, 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            cpu += times.user + times.system
            wakeups += proc.num_ctx_switches().voluntary
    return cpu, wakeups


def memory(procs: Sequence[psutil.Process]) -> tuple[int, int, int]:
    rss = pss = uss = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            info = proc.memory_full_info()
            rss, pss, uss = rss + info.rss, pss + info.pss, uss + info.uss
    return rss, pss, uss


def measure_idle(
    procs: Sequence[psutil.Process], seconds: float, interval: float, poll: Callable[[], None]
) -> tuple[Idle, Poll]:
    """CPU and wake-ups of ``procs`` over ``seconds``, while ``poll`` runs every ``interval``."""
    cpu0, wake0 = cpu_and_wakeups(procs)
    wall0 = time.monotonic()
    spent, walls = 0.0, []
    while (now := time.monotonic()) - wall0 < seconds:
        t0, c0 = time.perf_counter(), time.thread_time()
        poll()
        spent += time.thread_time() - c0
        walls.append(time.perf_counter() - t0)
        time.sleep(max(0.0, interval - (time.monotonic() - now)))
    elapsed = time.monotonic() - wall0
    cpu1, wake1 = cpu_and_wakeups(procs)
    rss, pss, uss = memory(procs)
    idle = Idle(len(procs), elapsed, cpu1 - cpu0, wake1 - wake0, rss, pss, uss)
    return idle, Poll(len(procs), len(walls), elapsed, spent, walls)


# -- baselines --------------------------------------------------------------------------------


@contextlib.contextmanager
def plain_sleeps(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(subprocess.Popen(["sleep", "3600"], start_new_session=True))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def exit_command(delay: float) -> list[str]:
    return ["sh", "-c", f"sleep {delay:.3f}; exec date +%s.%N"]


def baseline_exit_latency(count: int) -> Latency:
    """Popen'd commands, noticed by a thread blocked in poll() on their pidfds."""
    procs = [
        subprocess.Popen(exit_command(0.5 + i * EXIT_STAGGER), stdout=subprocess.PIPE)
        for i in range(count)
    ]
    noticed: dict[int, float] = {}
    poller = select.poll()
    fds = {os.pidfd_open(p.pid): p for p in procs}
    for fd in fds:
        poller.register(fd, select.POLLIN)
    while len(noticed) < count:
        for fd, _ in poller.poll():
            noticed[fds[fd].pid] = time.time()
            poller.unregister(fd)
            os.close(fd)
    samples = []
    for proc in procs:
        assert proc.stdout is not None
        printed = float(proc.stdout.read().decode().strip())
        proc.wait()
        samples.append(noticed[proc.pid] - printed)
    return Latency(samples)


# -- gpuyard ----------------------------------------------------------------------------------


class Pool:
    """An executor in a temporary home, its workers, and the wake-ups it gave."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="gpuyard-bench-supervise-")) / "home"
        self.executor = LocalExecutor(self.home)
        self.handles: dict[WorkerKey, Handle] = {}
        self.calls: list[tuple[float, WorkerKey | None]] = []
        self.started: set[WorkerKey] = set()
        self.believed: set[WorkerKey] = set()
        self._lock = threading.Lock()
        self.executor.set_wakeup(self._woken)

    def _woken(self, key: WorkerKey | None) -> None:
        now = time.time()
        handle = self.handles.get(key) if key is not None else None
        exited = False
        if handle is not None and key in self.started:
            exited = self.executor.status([handle])[0].state is WorkerState.EXITED
        with self._lock:
            self.calls.append((now, key))
            if key is not None:
                self.started.add(key)
                if exited:
                    self.believed.add(key)

    def launch(self, key: WorkerKey, argv: list[str]) -> None:
        self.handles[key] = self.executor.launch(WorkerLaunch(key, "local", argv, ENV, "/", 1.0))

    def wait_started(self, keys: Sequence[WorkerKey], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not set(keys) <= self.started:
            if time.monotonic() > deadline:
                missing = len(set(keys) - self.started)
                raise SystemExit(f"{missing} supervisors did not say they started")
            time.sleep(0.05)

    def supervisors(self, keys: Sequence[WorkerKey]) -> list[psutil.Process]:
        return [psutil.Process(self.handles[k]["pid"]) for k in keys]

    def exit_latency(self, keys: Sequence[WorkerKey], timeout: float) -> Latency:
        deadline = time.monotonic() + timeout
        pending = set(keys)
        while pending and time.monotonic() < deadline:
            pending = {k for k in pending if k not in self.believed and not self._ended(k)}
            time.sleep(0.05)
        samples = []
        for key in keys:
            text = self.executor.read_log(self.handles[key], 0, 100)[0].decode().strip()
            with self._lock:
                fired = [t for t, k in self.calls if k == key]
            if not text or not fired:
                continue
            printed = float(text)
            after = [t for t in fired if t >= printed]
            if after:
                samples.append(min(after) - printed)
        return Latency(samples, believed=len(self.believed & set(keys)))

    def _ended(self, key: WorkerKey) -> bool:
        return self.executor.status([self.handles[key]])[0].state is not WorkerState.RUNNING

    def close(self) -> None:
        """Kill every worker, wait for the supervisors, remove cgroups and the home."""
        handles = list(self.handles.values())
        for handle in handles:
            with contextlib.suppress(Exception):
                self.executor.kill(handle)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            statuses = self.executor.status(handles)
            if all(s.state is not WorkerState.RUNNING for s in statuses):
                break
            time.sleep(0.1)
        for handle in handles:  # a supervisor that did not end: end it and its worker
            with contextlib.suppress(psutil.Error):
                psutil.Process(handle["pid"]).kill()
        self.executor.status(handles)  # kills and removes what a dead supervisor left
        self.executor.close()
        shutil.rmtree(self.home.parent, ignore_errors=True)


# -- report -----------------------------------------------------------------------------------


def idle_table(rows: list[tuple[str, Idle]]) -> Table:
    table = Table(title="Idle processes: CPU, wake-ups and memory over the window")
    for column in (
        "processes",
        "n",
        "CPU % of a core",
        "wake-ups",
        "RSS/proc",
        "PSS/proc",
        "USS/proc",
        "PSS total",
    ):
        table.add_column(column, justify="left" if column == "processes" else "right")
    for name, idle in rows:
        n = max(idle.processes, 1)
        table.add_row(
            name,
            str(idle.processes),
            f"{idle.core_percent:.3f}",
            str(idle.wakeups),
            f"{idle.rss / n / 2**20:.1f} MiB",
            f"{idle.pss / n / 2**20:.1f} MiB",
            f"{idle.uss / n / 2**20:.1f} MiB",
            f"{idle.pss / 2**30:.2f} GiB",
        )
    return table


def poll_table(rows: list[tuple[str, Poll]], interval: float) -> Table:
    table = Table(
        title=f"Liveness polling of every worker every {interval:g} s (this thread's CPU)"
    )
    for column in (
        "poll",
        "handles",
        "calls",
        "CPU % of a core",
        "µs/handle",
        "p50 ms/call",
        "max ms/call",
    ):
        table.add_column(column, justify="left" if column == "poll" else "right")
    for name, poll in rows:
        table.add_row(
            name,
            str(poll.handles),
            str(poll.calls),
            f"{poll.core_percent:.2f}",
            f"{poll.per_handle_us:.2f}",
            f"{1000 * percentile(poll.wall_per_call, 50):.2f}",
            f"{1000 * max(poll.wall_per_call):.2f}",
        )
    return table


def latency_table(rows: list[tuple[str, Latency]], expected: int) -> Table:
    table = Table(title="Command exit -> noticed (ms)")
    for column in ("path", "n", "p50", "p99", "max", "status EXITED at callback"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for name, lat in rows:
        table.add_row(
            name,
            f"{len(lat.samples)}/{expected}",
            f"{lat.ms(50):.1f}",
            f"{lat.ms(99):.1f}",
            f"{1000 * max(lat.samples):.1f}" if lat.samples else "-",
            f"{lat.believed}/{expected}" if name.startswith("gpuyard") else "",
        )
    return table


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=1000, help="idle workers (default 1000)")
    parser.add_argument("--exits", type=int, default=100, help="exits timed (default 100)")
    parser.add_argument("--seconds", type=float, default=10.0, help="window (default 10)")
    parser.add_argument("--interval", type=float, default=0.5, help="status poll (default 0.5)")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.exits < 1 or args.seconds <= 0 or args.interval <= 0:
        parser.error("--workers and --exits must be at least 1, --seconds and --interval above 0")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on `kill` too
    console = Console()
    if not console.is_terminal:
        console.width = 120
    console.print(
        f"machine: {os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.1f} GiB, "
        f"Python {platform.python_version()}, {platform.platform()}"
    )

    with (
        console.status(f"baseline: {args.workers} plain sleeps"),
        plain_sleeps(args.workers) as sleeps,
    ):
        procs = [psutil.Process(p.pid) for p in sleeps]
        pids = [p.pid for p in sleeps]

        def kill_zero() -> None:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, 0)

        plain_idle, plain_poll = measure_idle(procs, args.seconds, args.interval, kill_zero)
    with console.status(f"baseline: {args.exits} exits noticed through pidfds"):
        plain_latency = baseline_exit_latency(args.exits)

    pool = Pool()
    try:
        warnings = pool.executor.warnings() or ["no warnings"]
        console.print(f"isolation: {pool.executor.isolation.mode}; {'; '.join(warnings)}")
        idle_keys = [WorkerKey(1, 0, rank) for rank in range(args.workers)]
        with console.status(f"gpuyard: starting {args.workers} workers"):
            t0 = time.monotonic()
            for key in idle_keys:
                pool.launch(key, ["sleep", "3600"])
            pool.wait_started(idle_keys, timeout=60 + args.workers * 0.2)
            started_in = time.monotonic() - t0
            time.sleep(1.0)  # let the last starts settle
        handles = [pool.handles[k] for k in idle_keys]
        with console.status(f"gpuyard: {args.seconds:g} s idle"):
            idle, polled = measure_idle(
                pool.supervisors(idle_keys),
                args.seconds,
                args.interval,
                lambda: pool.executor.status(handles),
            )
        exit_keys = [WorkerKey(2, 0, rank) for rank in range(args.exits)]
        with console.status(f"gpuyard: {args.exits} exits"):
            first = 0.5 + args.exits * 0.02  # the launches take a while: exits after the last
            for i, key in enumerate(exit_keys):
                pool.launch(key, exit_command(first + i * EXIT_STAGGER))
            latency = pool.exit_latency(exit_keys, timeout=60 + first + args.exits * EXIT_STAGGER)
    finally:
        with console.status("cleaning up"):
            pool.close()

    console.print(f"{args.workers} workers started in {started_in:.1f} s")
    console.print(
        idle_table([("gpuyard supervisors", idle), ("baseline: plain sleep", plain_idle)])
    )
    console.print(
        poll_table(
            [("gpuyard: executor.status()", polled), ("baseline: os.kill(pid, 0)", plain_poll)],
            args.interval,
        )
    )
    console.print(
        latency_table(
            [("gpuyard: wake-up callback", latency), ("baseline: pidfd poll", plain_latency)],
            args.exits,
        )
    )
    budget = idle.core_percent + polled.core_percent
    console.print(
        f"supervision of {args.workers} idle workers: {budget:.2f} % of one core "
        f"(supervisors {idle.core_percent:.3f} % + status polling {polled.core_percent:.2f} %)",
        markup=False,
    )


if __name__ == "__main__":
    main()
