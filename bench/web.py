"""Benchmark: the web UI's job list over a store of 10,000 jobs, and how soon a followed log
shows a new line.

What is measured, and how
-------------------------
A fresh store (SQLite in a temporary directory unless ``--database-url`` names another) gets
``--jobs`` jobs of 8 owners in 2 groups, spread over states, tiers and modes, through the
job service (the same writes as the API). A few are started on a fake executor by the
controller. The app is served over real HTTP on loopback (uvicorn, as ``gpuyard up`` serves it)
and each figure is the time of a whole request, measured by the client, ``--rounds`` times:

- *baseline*: ``GET /api/v1/jobs?limit=50``, the API's own first page, in the same run;
- *web first page*: ``GET /jobs`` (50 rows rendered to HTML), as the admin (sees every job) and
  as a plain user (the visibility clause in the query);
- *web filtered*: state + tier + sort by name; a name search; the last page;
- *form check*: ``POST /jobs/check``, what the form asks as one types: the spec's rules and
  the queue prediction (the scheduler run forward over the 9,000 queued jobs, bounded).

Log follow: a running job's worker log gets a line at a random moment; the page's script
polls ``/jobs/N/log?offset=…`` every 250 ms (as ``static/app.js`` does); the figure is the
time from the write to the poll that returns it (p50/p99 over ``--lines`` lines).

No figure is asserted: the target is < 300 ms for the first page and < 1 s for follow
(issue 15). Run: ``.venv/bin/python bench/web.py``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from gpuyard.clock import SystemClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.base import NodeInfo
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.auth import user_token
from gpuyard.testing.server import serve
from gpuyard.web.session import csrf_token

POLL = 0.25
MODES = ["single", "pytorch", "mpi", "tensorflow"]
TIERS = ["low", "normal", "high"]


def fill(app: object, jobs: int) -> None:
    services = app.state.services  # type: ignore[attr-defined]
    owners = [f"user{i}" for i in range(8)]
    for i, owner in enumerate(owners):
        user_token(app, owner, group="lab-a" if i % 2 else "lab-b")
    rng = random.Random(15)
    left = jobs
    while left:
        owner = rng.choice(owners)
        batch = min(left, 2500)
        specs = [
            JobSpec.model_validate(
                {
                    "name": f"train-{rng.randrange(100000)}",
                    "command": "python train.py --lr 0.1",
                    "mode": rng.choice(MODES),
                    "priority": rng.choice(TIERS[:2]),
                    "nodes": rng.choice([1, 1, 2]),
                    "resources": {"gpus": rng.choice([0, 1, 2])},
                    "access": "read-only",
                }
            )
            for _ in range(batch)
        ]
        services.jobs.submit_many(specs, owner=owner)
        left -= batch
    # A tenth stopped: the states vary.
    page = services.jobs.list_jobs(actor="root", offset=0, limit=1000)
    services.jobs.stop_many([j.id for j in page.items[::10]], actor="root")


def timed(client: httpx.Client, path: str, rounds: int, **params: object) -> list[float]:
    for _ in range(3):  # warm: the first requests of a connection and a query plan
        client.get(path, params=params).raise_for_status()
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        answer = client.get(path, params=params)
        times.append(time.perf_counter() - began)
        answer.raise_for_status()
    return times


def timed_post(client: httpx.Client, path: str, rounds: int, data: dict[str, str]) -> list[float]:
    client.post(path, data=data).raise_for_status()  # warm
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        answer = client.post(path, data=data)
        times.append(time.perf_counter() - began)
        answer.raise_for_status()
    return times


def row(label: str, times: list[float], baseline: float | None = None) -> None:
    times = sorted(times)
    p50 = statistics.median(times) * 1000
    p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))] * 1000
    ratio = f"{p50 / baseline:5.1f}x baseline" if baseline else ""
    print(f"  {label:<42} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   {ratio}")


def follow_latency(
    url: str, token: str, executor: FakeExecutor, job: int, lines: int
) -> list[float]:
    delays: list[float] = []
    with httpx.Client(base_url=url, cookies={"gpuyard_session": token}, timeout=10) as web:
        offset = web.get(f"/jobs/{job}/log").json()["next_offset"]
        rng = random.Random(1)
        for i in range(lines):
            wrote: list[float] = []

            def write(i: int = i, wrote: list[float] = wrote) -> None:
                time.sleep(rng.uniform(0, POLL))
                wrote.append(time.perf_counter())
                executor.write_log(job, f"line {i}\n".encode())

            writer = threading.Thread(target=write)
            writer.start()
            while True:
                chunk = web.get(f"/jobs/{job}/log", params={"offset": offset}).json()
                if chunk["data"]:
                    delays.append(time.perf_counter() - wrote[0])
                    offset = chunk["next_offset"]
                    break
                time.sleep(POLL)
            writer.join()
    return delays


def measure(
    base: str, admin: str, plain: str, executor: FakeExecutor, args: argparse.Namespace
) -> None:
    """Print every figure against the pool served at ``base``."""
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin}"})
    web = httpx.Client(base_url=base, cookies={"gpuyard_session": admin}, timeout=30)
    mine = httpx.Client(base_url=base, cookies={"gpuyard_session": plain}, timeout=30)
    base_times = timed(api, "/api/v1/jobs", args.rounds, limit=50)
    b = statistics.median(base_times) * 1000
    row("baseline: API GET /api/v1/jobs?limit=50", base_times)
    row("web /jobs first page (admin: all jobs)", timed(web, "/jobs", args.rounds), b)
    row("web /jobs first page (a user: own + group)", timed(mine, "/jobs", args.rounds), b)
    row(
        "web /jobs state+tier, sorted by name",
        timed(web, "/jobs", args.rounds, status="queued", priority="low", sort="name"),
        b,
    )
    row("web /jobs name search", timed(web, "/jobs", args.rounds, q="train-4"), b)
    row("web /jobs mode filter", timed(web, "/jobs", args.rounds, mode="mpi"), b)
    row("web /jobs last page", timed(web, "/jobs", args.rounds, page=args.jobs // 50), b)
    spec = {"command": "python train.py", "resources": {"gpus": 1}}
    predict_times = []
    for _ in range(args.rounds):
        began = time.perf_counter()
        api.post("/api/v1/jobs/predict", json=spec, timeout=30).raise_for_status()
        predict_times.append(time.perf_counter() - began)
    row("API POST /api/v1/jobs/predict (same work)", predict_times, b)
    form = {"csrf": csrf_token(admin), "command": "python train.py", "gpus": "1"}
    row("web form check + queue prediction", timed_post(web, "/jobs/check", args.rounds, form), b)
    running = api.get("/api/v1/jobs", params={"status": "running", "limit": 1}).json()
    if running["items"]:
        job = running["items"][0]["id"]
        row("web /jobs/N (job page)", timed(web, f"/jobs/{job}", args.rounds), b)
        delays = follow_latency(base, admin, executor, job, args.lines)
        print(f"  log follow (poll every {POLL * 1000:.0f} ms):")
        row("write -> shown by the page's poll", delays)
    else:
        print("  no job is running: log follow not measured")
    for client in (api, web, mine):
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'gpuyard.db'}"
        store = Store(url)
        store.migrate()
        nodes = [NodeInfo(f"n{i}", f"10.0.0.{i + 1}", 8, 64, 1 << 38) for i in range(4)]
        executor = FakeExecutor(nodes)
        settings = Settings(home=Path(tmp) / "home", user="root")
        app = create_app(settings, store=store, executor=executor, clock=SystemClock())
        admin = user_token(app, "root", admin=True)
        began = time.perf_counter()
        fill(app, args.jobs)
        controller = Controller(store, executor, clock=SystemClock())
        controller.register_nodes()
        for _ in range(3):
            controller.tick()
        print(
            f"{store.dialect}: {args.jobs} jobs stored in {time.perf_counter() - began:.1f} s; "
            f"{args.rounds} requests per figure, over HTTP on loopback"
        )
        plain = user_token(app, "user1")
        with serve(app) as base:
            measure(base, admin, plain, executor, args)
        store.close()


if __name__ == "__main__":
    main()
