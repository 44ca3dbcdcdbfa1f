"""Benchmark: how fast a real gpuyard pool takes a job from submission to a launched worker,
and how many submissions per second its API accepts, each beside the floor it is built on.

What is measured, and how
-------------------------
A real pool (``python -m gpuyard up --port 0``) is started in a subprocess in a fresh temporary
home, so nothing of the user's own pool is touched. Every API call goes through
:class:`gpuyard.client.Client`, over HTTP, as a user's script would.

1. **Submit -> launched latency** (idle pool, one job at a time). For each of ``--jobs`` jobs
   running ``true``:

   - *client-observed*: wall time from just before ``Client.submit`` until a poll of
     ``Client.job`` (every ~2 ms) shows the job past ``queued`` and ``starting``, i.e. its
     worker's supervisor has been spawned and the controller recorded it as running (or it has
     already ended). The status alone is not enough: ``starting`` already shows as ``running``.
   - *server-recorded*: ``started_at - created_at`` from the job's own timestamps. The server
     stamps ``started_at`` once the supervisor process has been spawned, so this excludes the
     HTTP round trips and the polling granularity of the client-observed figure.
   - *end to end*: the worker's ``finished_at`` (stamped by its supervisor once ``true`` has
     exited) minus ``created_at``; unlike the two above it includes the supervisor's own start.

   Each job is waited for until it ends before the next is submitted, so the pool is idle.
   The client's 2 ms polling is itself load on the pool; on a 2-core machine it shows.

   Baselines, measured in the same run just before the pool starts (so that they do not
   compete with it for the CPUs): ``subprocess.Popen(["true"]).wait()``, the cost of the
   command itself, and ``python -I -S -c pass``, a bare interpreter start, which the
   per-worker supervisor pays (plus its imports) before it can start the command.

2. **API submission throughput**. A blocker job takes every CPU of the node, so every later
   submission stays queued and the figure is the API's (validation, store write, controller
   wake-up), not the executor's. ``--clients`` threads, each with its own ``Client``, then
   submit ``--submissions`` jobs in all as fast as they can. Baseline: the same threads doing
   the same number of ``GET /api/v1/health`` requests, the floor of the HTTP stack.

3. **``--executor ray``** (issue 13): a Ray test cluster of ``--ray-nodes`` nodes (4 by
   default; :mod:`gpuyard.testing.raycluster`, every node on this machine, 2 fake GPUs and 1
   CPU each) and two pools beside each other, measured one after the other: the local executor
   with as many virtual nodes, and ``gpuyard up --executor ray`` on the cluster. For each, the
   submit -> launched latency above (``--jobs``, with warm agents: the warm-up job has started
   them), and a ``--ray-nodes`` x 2-slot PyTorch DDP job's (gloo, ``examples/ddp_train.py``)
   submit -> first step time: until worker 0's log shows ``step   0``, read through the API.
   The API throughput part is not run (it is not the executor's).

No timing is asserted: the script prints figures (and optionally writes them as JSON).
Run it as ``.venv/bin/python bench/launch.py`` (``--executor ray`` for the Ray figures).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from gpuyard.client import Client
from gpuyard.models import JobState, JobView

POOL_START_TIMEOUT = 60.0
POOL_STOP_TIMEOUT = 15.0
POLL_LAUNCH = 0.002
"""Seconds between polls while waiting for a launch: fine enough to resolve a few ms."""
POLL_END = 0.005
"""Seconds between polls while waiting for a `true` job to end (only keeps the pool idle)."""
JOB_END_TIMEOUT = 30.0
CPUS_PER_NODE = 64
"""Far above this machine's cores, so CPU reservations never hold a latency job back."""

# A job in one of these states has not had its worker spawned yet.
_NOT_LAUNCHED = frozenset({JobState.QUEUED, JobState.STARTING})


# -- statistics -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """Latency figures in milliseconds."""

    n: int
    p50: float
    p99: float
    mean: float
    max: float


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(seconds: Sequence[float]) -> Summary:
    ms = [s * 1000 for s in seconds]
    return Summary(
        n=len(ms),
        p50=percentile(ms, 50),
        p99=percentile(ms, 99),
        mean=statistics.fmean(ms),
        max=max(ms),
    )


# -- the pool under test ----------------------------------------------------------------------


@dataclass
class Pool:
    home: Path
    proc: subprocess.Popen[bytes]
    url: str = ""
    log_problems: list[str] = field(default_factory=list)
    """Filled in once the pool has stopped, so that errors at shutdown are seen too."""

    @property
    def log_path(self) -> Path:
        return self.home / "pool.log"

    @property
    def token(self) -> str:
        """The pool owner's token, which `gpuyard up` wrote (an admin)."""
        return (self.home / "owner.token").read_text().strip()


@contextlib.contextmanager
def running_pool(
    cpus_per_node: float,
    *,
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    keep: bool = False,
) -> Iterator[Pool]:
    """A pool in a fresh temporary home; stopped, and its home removed (unless ``keep``), on
    the way out. ``options`` are more options of ``gpuyard up``; ``env`` more of its
    environment."""
    home = Path(tempfile.mkdtemp(prefix="gpuyard-bench-"))
    environ = {**os.environ, "GPUYARD_HOME": str(home)}
    # The benchmark's own settings must not leak into the pool (another URL, database, ...).
    for key in ("GPUYARD_URL", "GPUYARD_DATABASE_URL", "GPUYARD_PORT", "GPUYARD_VIRTUAL_NODES"):
        environ.pop(key, None)
    environ.update(env or {})
    argv = [sys.executable, "-m", "gpuyard", "up", "--port", "0"]
    argv += ["--cpus-per-node", str(cpus_per_node), *options]
    with open(home / "pool.log", "ab") as log:
        # A session of its own: a Ctrl-C on the benchmark must reach us first, so that the
        # finally block below still stops the pool in order.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=environ,
            start_new_session=True,
        )
    pool = Pool(home=home, proc=proc)
    try:
        pool.url = wait_ready(pool)
        # Clients of this process (and wrk) sign in as the pool's owner.
        os.environ["GPUYARD_TOKEN"] = pool.token
        yield pool
    finally:
        stop_pool(pool)
        kill_leftover_workers(home)
        pool.log_problems = pool_log_problems(pool)
        if not keep:
            shutil.rmtree(home, ignore_errors=True)


def wait_ready(pool: Pool) -> str:
    """Wait for server.json (written by this very process) and a 200 from /health."""
    deadline = time.monotonic() + POOL_START_TIMEOUT
    server_file = pool.home / "server.json"
    while time.monotonic() < deadline:
        if pool.proc.poll() is not None:
            raise SystemExit(
                f"the pool exited with {pool.proc.returncode} before it was ready:\n"
                + pool.log_path.read_text(errors="replace")[-2000:]
            )
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, KeyError):
            info = json.loads(server_file.read_text())
            url = str(info["url"]).rstrip("/")
            # A stale file from another process would point elsewhere; the pid proves it is ours.
            if int(info["pid"]) == pool.proc.pid:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200:
                        return url
        time.sleep(0.05)
    raise SystemExit(f"the pool was not ready within {POOL_START_TIMEOUT:.0f}s")


def stop_pool(pool: Pool) -> None:
    """SIGTERM (the pool's own clean shutdown), then SIGKILL if it does not exit in time."""
    if pool.proc.poll() is not None:
        return
    pool.proc.send_signal(signal.SIGTERM)
    try:
        pool.proc.wait(POOL_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pool.proc.kill()
        pool.proc.wait()


def kill_leftover_workers(home: Path) -> None:
    """SIGKILL the process group of any worker that never recorded its exit.

    Workers run in sessions of their own and outlive the pool by design (the next pool adopts
    them); after an aborted run nothing would adopt them, so the benchmark ends them itself.
    Groups whose worker wrote exit.json are left alone: their pgid may have been reused.
    """
    for state_file in home.glob("supervisors/*/state.json"):  # docs/runtime.md
        if (state_file.parent / "exit.json").exists():
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, json.JSONDecodeError):
            os.killpg(int(json.loads(state_file.read_text())["pid"]), signal.SIGKILL)
    from gpuyard.testing.process import unmount_node_memory

    unmount_node_memory(home)  # what jobs that never ended hold (docs/checkpoints.md)


def pool_log_problems(pool: Pool, limit: int = 10) -> list[str]:
    """Lines of pool.log that report a problem (errors, warnings, tracebacks)."""
    try:
        lines = pool.log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    words = (" ERROR ", " WARNING ", " CRITICAL ", "Traceback")
    return [line for line in lines if any(w in line for w in words)][:limit]


# -- 1. submit -> launched latency ------------------------------------------------------------


@dataclass(frozen=True)
class LaunchSample:
    client_s: float
    """Client clock: submit call to a poll showing the worker launched."""
    server_s: float
    """Server clock: the job's started_at - created_at."""
    done_s: float
    """Server clock: the worker's finished_at - the job's created_at (the command has run)."""


def poll_job(
    client: Client, job_id: int, done: Callable[[JobView], bool], every: float, timeout: float
) -> JobView:
    deadline = time.monotonic() + timeout
    while True:
        job = client.job(job_id)
        if done(job):
            return job
        if time.monotonic() >= deadline:
            raise TimeoutError(f"job {job_id} is still {job.state.value} after {timeout:.0f}s")
        time.sleep(every)


def launch_once(client: Client) -> LaunchSample:
    t0 = time.perf_counter()
    job = client.submit({"command": "true", "name": "lat"})
    job = poll_job(
        client, job.id, lambda j: j.state not in _NOT_LAUNCHED, POLL_LAUNCH, JOB_END_TIMEOUT
    )
    client_s = time.perf_counter() - t0
    if job.started_at is None:  # ended without a launch (it failed to start): a bad sample
        raise RuntimeError(f"job {job.id} ended {job.state.value} without starting: {job.reason}")
    server_s = (job.started_at - job.created_at).total_seconds()
    # Keep the pool idle for the next sample; the figure above is already taken.
    job = poll_job(client, job.id, lambda j: j.status.is_terminal(), POLL_END, JOB_END_TIMEOUT)
    finished_at = job.workers[0].finished_at if job.workers else None
    if job.state is not JobState.SUCCEEDED or finished_at is None:
        raise RuntimeError(f"job {job.id} ended {job.state.value}: {job.reason}")
    # The supervisor stamps the worker's finished_at when `true` has exited: the end-to-end
    # figure, including the supervisor's own start, which the launch figures do not see.
    done_s = (finished_at - job.created_at).total_seconds()
    return LaunchSample(client_s=client_s, server_s=server_s, done_s=done_s)


def measure_launch(client: Client, count: int) -> list[LaunchSample]:
    launch_once(client)  # warm-up: first-use imports, connection setup, SQLite page cache
    return [launch_once(client) for _ in range(count)]


def measure_spawn(argv: Sequence[str], count: int) -> list[float]:
    """Wall time to start ``argv`` and wait for it, ``count`` times (after one warm-up)."""
    subprocess.run(argv, check=True)
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        subprocess.Popen(argv).wait()
        samples.append(time.perf_counter() - t0)
    return samples


# -- 2. API throughput ------------------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    requests: int
    clients: int
    seconds: float
    per_second: float
    latency: Summary


def concurrent_calls(
    url: str, clients: int, total: int, call: Callable[[Client], object]
) -> tuple[Throughput, list[object]]:
    """``total`` calls spread over ``clients`` threads, each with its own Client.

    The clock runs from the moment every thread is connected and released together until the
    last one finishes, so thread start-up and connection setup are not counted.
    """
    shares = [total // clients + (i < total % clients) for i in range(clients)]
    barrier = threading.Barrier(clients + 1)
    latencies: list[list[float]] = [[] for _ in shares]
    results: list[list[object]] = [[] for _ in shares]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with Client(url) as client:
                client.health()  # open the connection before the clock starts
                barrier.wait()
                for _ in range(shares[i]):
                    t0 = time.perf_counter()
                    results[i].append(call(client))
                    latencies[i].append(time.perf_counter() - t0)
        except threading.BrokenBarrierError:
            return  # another thread failed first; its error is the one reported
        except BaseException as exc:  # re-raised in the main thread below
            errors.append(exc)
            barrier.abort()  # a thread that fails before the barrier must not hang the rest

    # Daemons: after a Ctrl-C in the main thread they must not keep the benchmark alive.
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    flat = [s for per in latencies for s in per]
    figures = Throughput(
        requests=len(flat),
        clients=clients,
        seconds=elapsed,
        per_second=len(flat) / elapsed,
        latency=summarize(flat),
    )
    return figures, [r for per in results for r in per]


def start_blocker(client: Client) -> JobView:
    """A job holding every CPU of the node, so that later submissions stay queued."""
    cpus = client.nodes()[0].cpus
    job = client.submit(
        {
            "command": "sleep 600",
            "name": "blocker",
            "resources": {"cpus": cpus},
            "graceful_shutdown": 1,
        }
    )
    return poll_job(client, job.id, lambda j: j.state is JobState.RUNNING, 0.05, JOB_END_TIMEOUT)


def queued_ids(client: Client, name: str) -> list[int]:
    """Ids of the queued jobs whose name contains ``name``, every page."""
    ids: list[int] = []
    while True:
        page = client.jobs(status=["queued"], name=name, offset=len(ids), limit=1000)
        ids += [job.id for job in page.items]
        if not page.items or len(ids) >= page.total:
            return ids


def stop_jobs(url: str, clients: int, job_ids: Sequence[int]) -> None:
    """Stop the given jobs, ``clients`` requests at a time."""
    remaining = iter(job_ids)
    lock = threading.Lock()

    def stop_some(client: Client) -> object:
        with lock:
            job_id = next(remaining)
        return client.stop(job_id)

    if job_ids:
        concurrent_calls(url, min(clients, len(job_ids)), len(job_ids), stop_some)


def measure_throughput(
    url: str, clients: int, submissions: int
) -> tuple[Throughput, Throughput, dict[str, int]]:
    """Submission and health throughput with the pool held by a blocker job."""
    name = "tput"
    with Client(url) as client:
        blocker = start_blocker(client)
        try:
            health, _ = concurrent_calls(url, clients, submissions, lambda c: c.health())
            spec = {"command": "true", "name": name}
            submit, submitted = concurrent_calls(
                url, clients, submissions, lambda c: c.submit(spec)
            )
        finally:
            # Queued jobs go first: stopping the blocker first would let them all start. They
            # are listed from the server, so that a run that failed half way is cleaned too.
            queued = queued_ids(client, name)
            stop_jobs(url, clients, queued)
            client.stop(blocker.id)
            poll_job(client, blocker.id, lambda j: j.status.is_terminal(), 0.05, JOB_END_TIMEOUT)
    # Every submission should still have been waiting behind the blocker.
    return submit, health, {"submitted": len(submitted), "still_queued": len(queued)}


# -- report -----------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def ratio(value: float, base: float) -> float:
    return value / base if base else float("inf")


LATENCY_LABELS = {
    "launched_client": "gpuyard: launched, client-observed",
    "launched_server": "gpuyard: launched, server started_at",
    "command_ended_server": "gpuyard: `true` ended, worker finished_at",
    "baseline_true": "baseline: Popen(['true']).wait()",
    "baseline_python": "baseline: python -I -S -c pass",
}
LATENCY_LEGEND = (
    "launched, client-observed: submit call -> a poll shows the job running (worker spawned)\n"
    "launched, server started_at: job started_at - created_at (server clock, no HTTP)\n"
    "`true` ended, worker finished_at: worker finished_at - job created_at (end to end)"
)


def latency_table(figures: dict[str, Summary]) -> Table:
    true, python = figures["baseline_true"].p50, figures["baseline_python"].p50
    table = Table(title="Submit -> launch latency (ms), idle pool, one job at a time")
    columns = ("measure", "n", "p50", "p99", "mean", "max", "p50 / true", "p50 / python")
    for column in columns:
        table.add_column(column, justify="left" if column == "measure" else "right")
    for key, s in figures.items():
        table.add_row(
            LATENCY_LABELS[key],
            str(s.n),
            f"{s.p50:.2f}",
            f"{s.p99:.2f}",
            f"{s.mean:.2f}",
            f"{s.max:.2f}",
            f"{ratio(s.p50, true):.1f}x",
            f"{ratio(s.p50, python):.2f}x",
        )
    return table


def throughput_table(submit: Throughput, health: Throughput) -> Table:
    table = Table(title=f"API throughput, {submit.clients} concurrent clients")
    for column in ("measure", "requests", "seconds", "req/s", "p50 ms", "p99 ms", "ratio"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for name, t, shown in (
        ("POST /jobs (submit)", submit, f"{ratio(submit.per_second, health.per_second):.2f}x"),
        ("GET /health (baseline)", health, ""),
    ):
        table.add_row(
            name,
            str(t.requests),
            f"{t.seconds:.2f}",
            f"{t.per_second:.0f}",
            f"{t.latency.p50:.2f}",
            f"{t.latency.p99:.2f}",
            shown,
        )
    return table


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=200, help="latency jobs (default 200)")
    parser.add_argument(
        "--submissions", type=int, default=800, help="throughput submissions in all (default 800)"
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write figures as JSON")
    parser.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="ray: the Ray executor on a Ray test cluster, beside the local one",
    )
    parser.add_argument("--ray-nodes", type=int, default=4, help="Ray test nodes (default 4)")
    args = parser.parse_args(argv)
    for name in ("jobs", "submissions", "clients"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


DDP = Path(__file__).resolve().parents[1] / "examples" / "ddp_train.py"
DDP_TIMEOUT = 300.0


def ddp_first_step(client: Client, nodes: int) -> dict[str, Any]:
    """Submit a ``nodes`` x 2-slot DDP job; seconds until worker 0's log shows its first step,
    and until the job ends (and whether it succeeded with identical weights)."""
    t0 = time.perf_counter()
    job = client.submit(
        {
            "command": f"{sys.executable} {DDP} --steps 20",
            "mode": "pytorch",
            "nodes": nodes,
            "resources": {"gpus": 2, "cpus": 1},
            "name": "ddp-bench",
        }
    )
    first_step = None
    log = ""
    deadline = time.monotonic() + DDP_TIMEOUT
    while time.monotonic() < deadline:
        view = client.job(job.id)
        if view.state not in _NOT_LAUNCHED:
            log = client.logs(job.id, worker=0, limit=1 << 20).data
            if first_step is None and "step   0" in log:
                first_step = time.perf_counter() - t0
        if view.status.is_terminal():
            break
        time.sleep(0.05)
    ended = time.perf_counter() - t0
    log = client.logs(job.id, worker=0, limit=1 << 20).data
    return {
        "first_step_s": first_step,
        "ended_s": ended,
        "state": client.job(job.id).state.value,
        "identical": f"{nodes * 2} ranks on {nodes} nodes: weights identical" in log,
        "nodes": sorted({w.node for w in client.job(job.id).workers}),
    }


def ray_main(args: argparse.Namespace, console: Console) -> None:
    """Local and Ray pools beside each other on a Ray test cluster of this machine."""
    from gpuyard.testing.raycluster import ray_cluster

    nodes = args.ray_nodes
    results: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    with ray_cluster(nodes, gpus_per_node=2) as cluster:
        console.print(
            f"Ray test cluster: head {cluster.address} + {nodes} nodes, up in "
            f"{time.monotonic() - started:.1f} s"
        )
        # Jobs run as the pool's own user in both (as in the tests): the DDP job runs this
        # checkout's Python, which other accounts may not be able to reach.
        same = {"GPUYARD_RUN_AS": "pool", "GPUYARD_INSPECT_INTERVAL": "0"}
        pools: list[tuple[str, Sequence[str], dict[str, str]]] = [
            ("local", ["--virtual-nodes", str(nodes), "--gpus-per-node", "2"], same),
            (
                "ray",
                ["--executor", "ray", "--ray-address", cluster.address],
                {**same, "GPUYARD_RAY_INTERFACE": "lo"},
            ),
        ]
        for name, options, env in pools:
            with running_pool(1, options=options, env=env) as pool, Client(pool.url) as client:
                with console.status(f"{name}: latency, {args.jobs} jobs"):
                    samples = measure_launch(client, args.jobs)
                with console.status(f"{name}: {nodes}-node DDP"):
                    ddp = ddp_first_step(client, nodes)
            results[name] = {
                "launched_client": summarize([s.client_s for s in samples]),
                "launched_server": summarize([s.server_s for s in samples]),
                "command_ended_server": summarize([s.done_s for s in samples]),
                "ddp": ddp,
                "log_problems": pool.log_problems,
            }
    table = Table(title=f"Submit -> launch (ms), idle pool, {args.jobs} jobs; and a DDP job")
    for column in ("measure", "local p50", "local p99", "ray p50", "ray p99"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for key, label in LATENCY_LABELS.items():
        if key in results["local"]:
            loc, ray = results["local"][key], results["ray"][key]
            table.add_row(
                label, f"{loc.p50:.1f}", f"{loc.p99:.1f}", f"{ray.p50:.1f}", f"{ray.p99:.1f}"
            )
    console.print(table)
    for name in ("local", "ray"):
        ddp = results[name]["ddp"]
        first = ddp["first_step_s"]
        console.print(
            f"{name}: {nodes} nodes x 2 slots DDP on {', '.join(ddp['nodes'])}: submit -> first "
            f"step {'-' if first is None else f'{first:.1f} s'}, -> end {ddp['ended_s']:.1f} s, "
            f"{ddp['state']}, weights identical: {ddp['identical']}",
            markup=False,
        )
        if results[name]["log_problems"]:
            console.print(f"{name} pool.log problems:", *results[name]["log_problems"], sep="\n  ")
    if args.json:
        report = {
            "machine": machine_info(),
            "ray_nodes": nodes,
            "pools": {
                name: {k: asdict(v) if isinstance(v, Summary) else v for k, v in figures.items()}
                for name, figures in results.items()
            },
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"figures written to {args.json}")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console.width = 120  # piped to a file: do not wrap the tables at 80 columns
    info = machine_info()
    console.print(f"machine: {info['cpus']} CPUs, Python {info['python']}, {info['platform']}")
    if args.executor == "ray":
        ray_main(args, console)
        return

    # Baselines first, before a pool competes with them for the CPUs.
    with console.status("baselines: spawning `true` and a bare Python"):
        spawn_true = summarize(measure_spawn(["true"], args.jobs))
        spawn_python = summarize(
            measure_spawn([sys.executable, "-I", "-S", "-c", "pass"], args.jobs)
        )

    with running_pool(CPUS_PER_NODE) as pool:
        console.print(f"pool: {pool.url} (home {pool.home})")
        with Client(pool.url) as client, console.status(f"latency: {args.jobs} jobs"):
            samples = measure_launch(client, args.jobs)
        with console.status(f"throughput: {args.submissions} submissions"):
            submit, health, queue = measure_throughput(pool.url, args.clients, args.submissions)
        with Client(pool.url) as client:
            controller = client.health().get("controller", {})
    problems = pool.log_problems

    latency = {
        "launched_client": summarize([s.client_s for s in samples]),
        "launched_server": summarize([s.server_s for s in samples]),
        "command_ended_server": summarize([s.done_s for s in samples]),
        "baseline_true": spawn_true,
        "baseline_python": spawn_python,
    }
    console.print(latency_table(latency))
    console.print(LATENCY_LEGEND, markup=False)
    console.print(throughput_table(submit, health))
    console.print(
        f"  {queue['submitted']} submitted, {queue['still_queued']} still queued behind the "
        f"blocker; controller errors: {controller.get('errors')} {controller.get('last_error')}",
        markup=False,
    )
    if problems:
        console.print("pool.log problems:", *problems, sep="\n  ", markup=False)

    if args.json:
        report = {
            "machine": info,
            "latency_ms": {k: asdict(v) for k, v in latency.items()},
            "latency_p50_ratio_vs_true": {
                k: ratio(v.p50, spawn_true.p50) for k, v in latency.items()
            },
            "latency_p50_ratio_vs_python": {
                k: ratio(v.p50, spawn_python.p50) for k, v in latency.items()
            },
            "throughput": {"submit": asdict(submit), "health": asdict(health)},
            "throughput_ratio_submit_vs_health": ratio(submit.per_second, health.per_second),
            "queue_after_submissions": queue,
            "controller": controller,
            "pool_log_problems": problems,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
