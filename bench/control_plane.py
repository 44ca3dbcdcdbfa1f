"""Benchmark: the control plane under load, each figure beside a baseline from the same run.

A real pool (``gpuyard up``, local executor, virtual nodes) in a fresh temporary home per
scenario; real HTTP; real supervisors and processes for every worker. Scenarios (``--only``):

submit   Submissions per second from 1 and from 16 concurrent clients, on a pool of 1 node and
         of 1,000 nodes, on SQLite (and PostgreSQL with ``--postgres``). Every job waits behind
         a blocker (they ask for every node), so the figure is the API's. The load comes from
         ``wrk`` (a C load generator, so the client does not eat the server's CPU) when it is
         installed, else from Python threads. Baseline: ``GET /health`` from the same
         generator, the floor of the HTTP stack. Exactly once: the jobs stored are counted
         against the answers received (wrk stops with up to one request per connection in
         flight), and a run from Python clients with unique names checks each one.
batch    ``POST /jobs/batch`` of 1,000 jobs, 10 times: jobs per second, beside single
         submissions from 16 clients.
fill     5,000 gangs of 1-64 whole nodes (the shape of real Slurm's fill test, see
         ``../shared/slurm-recipe/bench_fill.py``), submitted by 16 clients onto 1,000 virtual
         8-GPU nodes: when every node is allocated, counted from the last submission; ``GET
         /health`` latency every 20 ms from the first submission until every placed worker
         runs (launching 1,000 supervisors included).
deep     2,000 one-GPU jobs running ``true`` on one 8-GPU node: starts per second while the
         queue drains, and the share of slot-time left idle while jobs wait.
churn    300 gangs x 10 s on 200 nodes (and ``--churn-nodes 1000`` for 1,000 gangs): mean
         allocation while jobs wait, makespan against the ideal (node-seconds / nodes).
stop     1,000 queued jobs stopped in one request, beside 200 single stops (scaled).

Real Slurm 22.05 on the same kind of machine (1,000 emulated nodes, 2 cores), from
``../shared/slurm-recipe/README.md``, is printed beside as the reference to beat.

The pool's state is sampled from its SQLite database, read-only, by this process. Nothing is
asserted; the figures are printed (and written as JSON with ``--json``). Every pool is stopped
and every worker ended on the way out. Run: ``.venv/bin/python bench/control_plane.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console
from rich.table import Table

from gpuyard.client import Client
from launch import Pool, kill_leftover_workers, machine_info, percentile, running_pool

SLURM = {
    "submit_1": 222.0,
    "submit_16": 393.0,
    "fill_100pct_s": 6.4,
    "fill_tuned_s": 0.9,
    "churn_allocation": 0.87,
}
"""Real Slurm 22.05 here (../shared/slurm-recipe/README.md): sbatch/s of held jobs from 1 and
16 clients at 1,000 nodes; seconds to allocate all 1,000 nodes from 5,000 queued jobs (default
and tuned); mean allocation in churn."""
HOLDING = ("starting", "running", "stopping", "expiring", "failing", "completing", "suspending")
SIZES = ([1, 2, 4, 8, 16, 32, 64], [30, 20, 20, 15, 10, 4, 1])
"""Gang sizes and weights of real Slurm's fill test (bench_fill.py)."""


# -- the pool --------------------------------------------------------------------------------


def pool_options(nodes: int, gpus: int = 8) -> list[str]:
    return [
        "--virtual-nodes",
        str(nodes),
        "--gpus-per-node",
        str(gpus),
        "--memory-per-node",
        "64G",
    ]


@contextlib.contextmanager
def pool(nodes: int, *, gpus: int = 8, database_url: str | None = None) -> Iterator[Pool]:
    env = {"GPUYARD_DATABASE_URL": database_url} if database_url else {}
    with running_pool(8, options=pool_options(nodes, gpus), env=env) as p:
        try:
            yield p
        finally:
            stop_everything(p)


def stop_everything(p: Pool) -> None:
    """Stop every job that has not ended (queued ones first, so none starts meanwhile), and
    wait a little for their workers; whatever is left is killed with the pool."""
    with contextlib.suppress(Exception), Client(p.url) as client:
        for status in (["queued"], ["running"]):
            while True:
                page = client.jobs(status=status, limit=1000)
                if not page.items:
                    break
                client.stop_many([j.id for j in page.items])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and client.jobs(status=["running"], limit=1).total:
            time.sleep(0.2)
    kill_leftover_workers(p.home)


class Database:
    """The pool's SQLite database, read-only, for sampling its state."""

    def __init__(self, home: Path) -> None:
        self.path = home / "gpuyard.db"
        self.conn = sqlite3.connect(
            f"file:{self.path}?mode=ro", uri=True, timeout=30, check_same_thread=False
        )
        self.lock = threading.Lock()
        """The samplers' threads share the connection."""

    def count(self, where: str = "1=1") -> int:
        with self.lock:
            query = f"SELECT count(*) FROM jobs WHERE {where}"  # noqa: S608
            return int(self.conn.execute(query).fetchone()[0])

    def allocated_nodes(self) -> int:
        marks = ",".join("?" * len(HOLDING))
        nodes: set[str] = set()
        with self.lock:
            rows = self.conn.execute(
                f"SELECT placement FROM jobs WHERE state IN ({marks})",  # noqa: S608
                HOLDING,
            ).fetchall()
        for (placement,) in rows:
            nodes.update(slot["node"] for slot in json.loads(placement or "[]"))
        return len(nodes)

    def states(self) -> dict[str, int]:
        with self.lock:
            return dict(self.conn.execute("SELECT state, count(*) FROM jobs GROUP BY state"))


# -- load generators -------------------------------------------------------------------------


@dataclass
class Load:
    """What a load generator measured."""

    requests: int
    seconds: float
    per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    tool: str


def wrk_load(
    url: str, path: str, *, clients: int, seconds: float, body: dict[str, Any] | None
) -> Load:
    """``wrk`` with ``clients`` connections (two threads, one for a single client)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        if body is not None:
            script.write(
                'wrk.method = "POST"\n'
                f"wrk.body = {json.dumps(json.dumps(body))}\n"
                'wrk.headers["Content-Type"] = "application/json"\n'
            )
        script.write(f'wrk.headers["Authorization"] = "Bearer {os.environ["GPUYARD_TOKEN"]}"\n')
    try:
        out = subprocess.run(
            [
                "wrk",
                f"-t{min(2, clients)}",
                f"-c{clients}",
                f"-d{seconds:g}s",
                "--latency",
                "-s",
                script.name,
                url + path,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        Path(script.name).unlink()
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0
    errors += sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    return Load(
        requests=requests,
        seconds=seconds,
        per_second=float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        p50_ms=_wrk_ms(out, "50%"),
        p99_ms=_wrk_ms(out, "99%"),
        errors=errors,
        tool="wrk",
    )


def _wrk_ms(out: str, label: str) -> float:
    value, unit = re.search(rf"{label}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def python_load(
    url: str,
    path: str,
    *,
    clients: int,
    total: int,
    body: Callable[[int], dict[str, Any] | None],
) -> tuple[Load, list[bytes]]:
    """``total`` requests from ``clients`` threads, each on one kept-alive connection
    (``http.client``: the least a Python client costs). Returns the answers too."""
    host = urlsplit(url)
    lock = threading.Lock()
    counter = iter(range(total))
    latencies: list[float] = []
    answers: list[bytes] = []
    errors = [0]
    start = threading.Barrier(clients + 1)

    auth = f"Bearer {os.environ['GPUYARD_TOKEN']}"

    def worker() -> None:
        conn = http.client.HTTPConnection(host.hostname, host.port, timeout=120)
        start.wait()
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            payload = body(i)
            t0 = time.perf_counter()
            if payload is None:
                conn.request("GET", path, headers={"Authorization": auth})
            else:
                conn.request(
                    "POST",
                    path,
                    body=json.dumps(payload),
                    headers={"Content-Type": "application/json", "Authorization": auth},
                )
            response = conn.getresponse()
            data = response.read()
            elapsed = time.perf_counter() - t0
            with lock:
                latencies.append(elapsed)
                if response.status >= 300:
                    errors[0] += 1
                else:
                    answers.append(data)
        conn.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    ms = [s * 1000 for s in latencies]
    return Load(
        requests=len(ms),
        seconds=seconds,
        per_second=len(ms) / seconds,
        p50_ms=percentile(ms, 50),
        p99_ms=percentile(ms, 99),
        errors=errors[0],
        tool="python",
    ), answers


def held_spec(nodes: int, name: str = "held") -> dict[str, Any]:
    """A job that waits behind the blocker whatever the pool's size: it asks for every node."""
    return {
        "command": "sleep 1",
        "name": name,
        "nodes": nodes,
        "resources": {"gpus": 8},
        "max_runtime": 3600,
    }


def start_blocker(client: Client) -> None:
    client.submit(
        {
            "command": "sleep 3600",
            "name": "blocker",
            "resources": {"gpus": 8},
            "node_names": [client.nodes()[0].name],
            "graceful_shutdown": 1,
        }
    )
    deadline = time.monotonic() + 30
    while not client.jobs(status=["running"], limit=1).total:
        if time.monotonic() > deadline:
            raise SystemExit("the blocker did not start within 30 s")
        time.sleep(0.05)


# -- scenarios -------------------------------------------------------------------------------


@dataclass
class SubmitFigures:
    database: str
    nodes: int
    clients: int
    submit: Load
    health: Load
    stored: int
    answered: int
    exact: str


def scenario_submit(
    console: Console, *, seconds: float, postgres: bool, database_url: str | None = None
) -> list[SubmitFigures]:
    figures = []
    use_wrk = shutil.which("wrk") is not None
    for nodes in (1, 1000):
        with pool(nodes, database_url=database_url) as p, Client(p.url) as client:
            start_blocker(client)
            db = Database(p.home) if database_url is None else None
            for clients in (1, 16):
                console.print(f"  submit: {nodes} node(s), {clients} client(s)")
                before = client.jobs(limit=1).total
                if use_wrk:
                    health = wrk_load(
                        p.url, "/api/v1/health", clients=clients, seconds=seconds, body=None
                    )
                    load = wrk_load(
                        p.url,
                        "/api/v1/jobs",
                        clients=clients,
                        seconds=seconds,
                        body=held_spec(nodes),
                    )
                else:
                    total = int(200 * seconds)
                    health, _ = python_load(
                        p.url, "/api/v1/health", clients=clients, total=total, body=lambda _i: None
                    )
                    load, _ = python_load(
                        p.url,
                        "/api/v1/jobs",
                        clients=clients,
                        total=total,
                        body=lambda _i, n=nodes: held_spec(n),
                    )
                time.sleep(0.5)  # requests still in flight when wrk stopped
                stored = client.jobs(limit=1).total - before
                answered = load.requests - load.errors
                slack = clients if load.tool == "wrk" else 0
                exact = "yes" if answered <= stored <= answered + slack else "NO"
                figures.append(
                    SubmitFigures(
                        "postgresql" if database_url else "sqlite",
                        nodes,
                        clients,
                        load,
                        health,
                        stored,
                        answered,
                        exact,
                    )
                )
                client.stop_many(_queued(client))
            if nodes == 1000:
                # Exactly once, job by job: unique names from 16 Python clients.
                names = [f"once-{i}" for i in range(2000)]
                load, answers = python_load(
                    p.url,
                    "/api/v1/jobs",
                    clients=16,
                    total=len(names),
                    body=lambda i, n=nodes, names=names: held_spec(n, names[i]),
                )
                ids = [json.loads(a)["id"] for a in answers]
                stored_names = _names(client, "once-")
                exact = (
                    "yes"
                    if len(set(ids)) == len(ids) == len(names)
                    and sorted(stored_names) == sorted(names)
                    else "NO"
                )
                figures.append(
                    SubmitFigures(
                        ("postgresql" if database_url else "sqlite") + " (python clients)",
                        nodes,
                        16,
                        load,
                        figures[-1].health,
                        len(stored_names),
                        len(ids),
                        exact,
                    )
                )
            del db
    if postgres and database_url is None:
        from gpuyard.testing.postgres import postgres_server, unavailable_reason

        reason = unavailable_reason()
        if reason:
            console.print(f"  PostgreSQL skipped: {reason}")
        else:
            with postgres_server() as server:
                figures += scenario_submit(
                    console, seconds=seconds, postgres=False, database_url=server.create_database()
                )
    return figures


def _queued(client: Client) -> list[int]:
    ids: list[int] = []
    while True:
        page = client.jobs(status=["queued"], offset=len(ids), limit=1000)
        ids += [j.id for j in page.items]
        if not page.items or len(ids) >= page.total:
            return ids[:5000]


def _names(client: Client, prefix: str) -> list[str]:
    names: list[str] = []
    offset = 0
    while True:
        page = client.jobs(name=prefix, offset=offset, limit=1000)
        names += [j.name for j in page.items]
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return names


@dataclass
class BatchFigures:
    jobs: int
    seconds: float
    per_second: float
    single_per_second: float


def scenario_batch(console: Console, *, batches: int = 10, size: int = 1000) -> BatchFigures:
    with pool(1) as p, Client(p.url) as client:
        start_blocker(client)
        spec = held_spec(1)
        console.print(f"  batch: {batches} x {size} jobs")
        t0 = time.perf_counter()
        for _ in range(batches):
            client.submit_many([spec] * size)
        seconds = time.perf_counter() - t0
        single, _ = python_load(p.url, "/api/v1/jobs", clients=16, total=2000, body=lambda _i: spec)
        return BatchFigures(batches * size, seconds, batches * size / seconds, single.per_second)


@dataclass
class Timeline:
    """Samples of the pool while a scenario runs: (seconds, allocated nodes, queued jobs)."""

    samples: list[tuple[float, int, int]] = field(default_factory=list)


def sample(db: Database, t0: float, stop: threading.Event, every: float, into: Timeline) -> None:
    while not stop.is_set():
        with contextlib.suppress(sqlite3.OperationalError):
            into.samples.append(
                (time.perf_counter() - t0, db.allocated_nodes(), db.count("state = 'queued'"))
            )
        stop.wait(every)


def watch_health(url: str, stop: threading.Event, every: float, into: list[float]) -> None:
    host = urlsplit(url)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
    while not stop.is_set():
        t0 = time.perf_counter()
        conn.request("GET", "/api/v1/health")
        conn.getresponse().read()
        into.append((time.perf_counter() - t0) * 1000)
        stop.wait(every)


def gangs(count: int, rng: random.Random, *, command: str, cap: int) -> list[dict[str, Any]]:
    sizes = [min(cap, s) for s in rng.choices(*SIZES, k=count)]
    return [
        {
            "command": command,
            "name": f"gang-{i}",
            "nodes": n,
            "resources": {"gpus": 8},
            "max_runtime": rng.choice([30, 60, 120, 240]) * 60,
            "graceful_shutdown": 1,
        }
        for i, n in enumerate(sizes)
    ]


@dataclass
class FillFigures:
    nodes: int
    gangs: int
    submit_seconds: float
    full_after_first_s: float | None
    full_after_last_s: float | None
    peak_allocated: int
    health_p50_ms: float
    health_p99_ms: float
    health_max_ms: float
    launched_after_last_s: float | None


def scenario_fill(console: Console, *, nodes: int = 1000, count: int = 5000) -> FillFigures:
    specs = gangs(count, random.Random(1), command="sleep 3600", cap=nodes)
    with pool(nodes) as p:
        db = Database(p.home)
        stop = threading.Event()
        timeline, health = Timeline(), []
        t0 = time.perf_counter()
        threads = [
            threading.Thread(target=sample, args=(db, t0, stop, 0.05, timeline), daemon=True),
            threading.Thread(target=watch_health, args=(p.url, stop, 0.02, health), daemon=True),
        ]
        for t in threads:
            t.start()
        console.print(f"  fill: {count} gangs onto {nodes} nodes from 16 clients")
        load, _ = python_load(
            p.url, "/api/v1/jobs", clients=16, total=count, body=lambda i: specs[i]
        )
        last = time.perf_counter() - t0
        launched = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if db.count("state = 'starting'") == 0 and db.allocated_nodes() == nodes:
                launched = time.perf_counter() - t0 - last
                break
            time.sleep(0.05)
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        full = next((t for t, alloc, _ in timeline.samples if alloc >= nodes), None)
        return FillFigures(
            nodes=nodes,
            gangs=count,
            submit_seconds=load.seconds,
            full_after_first_s=full,
            full_after_last_s=None if full is None else full - last,
            peak_allocated=max((a for _, a, _ in timeline.samples), default=0),
            health_p50_ms=percentile(health, 50),
            health_p99_ms=percentile(health, 99),
            health_max_ms=max(health),
            launched_after_last_s=launched,
        )


@dataclass
class DeepFigures:
    jobs: int
    slots: int
    seconds: float
    starts_per_second: float
    idle_share: float
    """Slot-time idle while jobs waited, as a share of all slot-time while jobs waited."""
    succeeded: int


def scenario_deep(console: Console, *, jobs: int = 2000, slots: int = 8) -> DeepFigures:
    with pool(1, gpus=slots) as p, Client(p.url) as client:
        db = Database(p.home)
        spec = {"command": "true", "name": "deep", "resources": {"gpus": 1}}
        console.print(f"  deep: {jobs} x 1-GPU `true` jobs on {slots} slots")
        busy: list[tuple[float, int, int]] = []
        t0 = time.perf_counter()
        for chunk in range(0, jobs, 1000):
            client.submit_many([spec] * min(1000, jobs - chunk))
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            states = db.states()
            queued = states.get("queued", 0)
            holding = sum(states.get(s, 0) for s in HOLDING)
            busy.append((time.perf_counter() - t0, holding, queued))
            if queued == 0 and holding == 0:
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        waiting = [(t, h) for t, h, q in busy if q > 0]
        idle = statistics.fmean(max(0, slots - h) / slots for _, h in waiting) if waiting else 0.0
        succeeded = db.count("state = 'succeeded'")
        return DeepFigures(jobs, slots, seconds, succeeded / seconds, idle, succeeded)


@dataclass
class ChurnFigures:
    nodes: int
    gangs: int
    makespan_s: float
    ideal_s: float
    allocation_while_waiting: float
    allocation_overall: float


def scenario_churn(console: Console, *, nodes: int, count: int, runtime: float) -> ChurnFigures:
    rng = random.Random(2)
    specs = gangs(count, rng, command=f"sleep {runtime:g}", cap=nodes)
    ideal = sum(s["nodes"] for s in specs) * runtime / nodes
    with pool(nodes) as p, Client(p.url) as client:
        db = Database(p.home)
        stop = threading.Event()
        timeline = Timeline()
        console.print(f"  churn: {count} gangs x {runtime:g} s on {nodes} nodes")
        t0 = time.perf_counter()
        sampler = threading.Thread(target=sample, args=(db, t0, stop, 0.25, timeline), daemon=True)
        sampler.start()
        for chunk in range(0, count, 1000):
            client.submit_many(specs[chunk : chunk + 1000])
        deadline = time.monotonic() + ideal * 4 + 120
        while time.monotonic() < deadline:
            if db.count(f"state NOT IN {_TERMINAL}") == 0:
                break
            time.sleep(0.1)
        makespan = time.perf_counter() - t0
        stop.set()
        sampler.join()
        samples = timeline.samples
        waiting = [a / nodes for _, a, q in samples if q > 0]
        return ChurnFigures(
            nodes=nodes,
            gangs=count,
            makespan_s=makespan,
            ideal_s=ideal,
            allocation_while_waiting=statistics.fmean(waiting) if waiting else 0.0,
            allocation_overall=statistics.fmean(a / nodes for _, a, _ in samples),
        )


_TERMINAL = "('succeeded', 'failed', 'stopped', 'expired')"


@dataclass
class StopFigures:
    jobs: int
    bulk_seconds: float
    single_per_second: float
    single_scaled_seconds: float


def scenario_stop(console: Console, *, jobs: int = 1000, singles: int = 200) -> StopFigures:
    with pool(1) as p, Client(p.url) as client:
        start_blocker(client)
        console.print(f"  stop: {jobs} queued jobs in one request; {singles} one by one")
        ids = client.submit_many([held_spec(1)] * jobs)
        t0 = time.perf_counter()
        result = client.stop_many(ids)
        bulk = time.perf_counter() - t0
        if result.failed or len(result.done) != jobs:
            raise SystemExit(f"bulk stop left {len(result.failed)} jobs: {result.failed[:3]}")
        ids = client.submit_many([held_spec(1)] * singles)
        t0 = time.perf_counter()
        for job_id in ids:
            client.stop(job_id)
        per_second = singles / (time.perf_counter() - t0)
        return StopFigures(jobs, bulk, per_second, jobs / per_second)


# -- report ----------------------------------------------------------------------------------


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row))
    return table


def report(console: Console, results: dict[str, Any]) -> None:
    if "submit" in results:
        rows = []
        for f in results["submit"]:
            slurm = SLURM["submit_1" if f.clients == 1 else "submit_16"]
            rows.append(
                (
                    f"{f.database}, {f.nodes} node(s), {f.clients} client(s), {f.submit.tool}",
                    f"{f.submit.per_second:.0f}",
                    f.submit.p50_ms,
                    f.submit.p99_ms,
                    f"{f.health.per_second:.0f}",
                    f"{f.submit.per_second / f.health.per_second:.2f}x",
                    f"{f.submit.per_second / slurm:.1f}x",
                    f"{f.stored}/{f.answered} {f.exact}",
                )
            )
        console.print(
            _table(
                "Submissions (jobs queued behind a blocker)",
                (
                    "run",
                    "jobs/s",
                    "p50 ms",
                    "p99 ms",
                    "health/s",
                    "vs health",
                    "vs Slurm",
                    "stored/answered, once",
                ),
                rows,
            )
        )
    if "batch" in results:
        b = results["batch"]
        console.print(
            _table(
                "Batch submission (POST /jobs/batch, 1,000 jobs a request)",
                ("jobs", "seconds", "jobs/s", "single, 16 clients", "ratio"),
                [
                    (
                        b.jobs,
                        b.seconds,
                        f"{b.per_second:.0f}",
                        f"{b.single_per_second:.0f}",
                        f"{b.per_second / b.single_per_second:.1f}x",
                    )
                ],
            )
        )
    if "fill" in results:
        f = results["fill"]
        console.print(
            _table(
                f"Fill: {f.gangs} gangs onto {f.nodes} nodes (Slurm: 100 % at "
                f"{SLURM['fill_100pct_s']} s, tuned {SLURM['fill_tuned_s']} s, after the queue "
                "was full)",
                (
                    "submitting",
                    "100 % after first",
                    "100 % after last",
                    "peak",
                    "all launched after last",
                    "health p50",
                    "p99",
                    "max",
                ),
                [
                    (
                        f"{f.submit_seconds:.1f} s",
                        _s(f.full_after_first_s),
                        _s(f.full_after_last_s),
                        f.peak_allocated,
                        _s(f.launched_after_last_s),
                        f"{f.health_p50_ms:.1f} ms",
                        f"{f.health_p99_ms:.1f} ms",
                        f"{f.health_max_ms:.0f} ms",
                    )
                ],
            )
        )
    if "deep" in results:
        d = results["deep"]
        console.print(
            _table(
                "Deep queue: 1-GPU `true` jobs on one 8-GPU node",
                (
                    "jobs",
                    "slots",
                    "seconds",
                    "starts/s",
                    "idle slot-time while jobs wait",
                    "succeeded",
                ),
                [
                    (
                        d.jobs,
                        d.slots,
                        d.seconds,
                        f"{d.starts_per_second:.1f}",
                        f"{100 * d.idle_share:.1f} %",
                        d.succeeded,
                    )
                ],
            )
        )
    if "churn" in results:
        console.print(
            _table(
                "Churn (Slurm at 1,000 nodes x 5,000 jobs: "
                f"{100 * SLURM['churn_allocation']:.0f} % allocation)",
                (
                    "nodes",
                    "gangs",
                    "makespan",
                    "ideal",
                    "ratio",
                    "allocation while jobs wait",
                    "overall",
                ),
                [
                    (
                        c.nodes,
                        c.gangs,
                        f"{c.makespan_s:.1f} s",
                        f"{c.ideal_s:.1f} s",
                        f"{c.makespan_s / c.ideal_s:.2f}x",
                        f"{100 * c.allocation_while_waiting:.1f} %",
                        f"{100 * c.allocation_overall:.1f} %",
                    )
                    for c in results["churn"]
                ],
            )
        )
    if "stop" in results:
        s = results["stop"]
        console.print(
            _table(
                "Stopping queued jobs",
                ("jobs", "one request", "one by one (scaled)", "ratio"),
                [
                    (
                        s.jobs,
                        f"{s.bulk_seconds * 1000:.0f} ms",
                        f"{s.single_scaled_seconds:.1f} s",
                        f"{s.single_scaled_seconds / s.bulk_seconds:.0f}x",
                    )
                ],
            )
        )


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


SCENARIOS = ("submit", "batch", "fill", "deep", "churn", "stop")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each load run")
    parser.add_argument("--postgres", action="store_true", help="submissions on PostgreSQL too")
    parser.add_argument("--churn-nodes", type=int, nargs="+", default=[200], help="churn pools")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write figures as JSON")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(args.only) - set(SCENARIOS)
    if unknown:
        parser.error(
            f"unknown scenario {', '.join(sorted(unknown))}; choose from {', '.join(SCENARIOS)}"
        )
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console.width = 160
    info = machine_info()
    console.print(f"machine: {info['cpus']} CPUs, Python {info['python']}, {info['platform']}")
    results: dict[str, Any] = {}
    if "submit" in args.only:
        results["submit"] = scenario_submit(console, seconds=args.seconds, postgres=args.postgres)
    if "batch" in args.only:
        results["batch"] = scenario_batch(console)
    if "fill" in args.only:
        results["fill"] = scenario_fill(console)
    if "deep" in args.only:
        results["deep"] = scenario_deep(console)
    if "churn" in args.only:
        results["churn"] = [
            scenario_churn(console, nodes=n, count=300 if n <= 200 else n, runtime=10.0)
            for n in args.churn_nodes
        ]
    if "stop" in args.only:
        results["stop"] = scenario_stop(console)
    report(console, results)
    if args.json:
        args.json.write_text(
            json.dumps({"machine": info, **_plain(results)}, indent=2, default=str)
        )


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


if __name__ == "__main__":
    main()
