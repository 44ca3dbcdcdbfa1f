"""Benchmark: what one usage-sampling round costs the store, and that history stays bounded.

What is measured, and how
-------------------------
A pool of ``--workers`` running one-worker jobs on a fake executor (each on a node of its own),
in a fresh database (SQLite in a temporary directory unless ``--database-url`` names another).
The controller's sampler (:mod:`gpuyard.controller.sampler`) then runs ``--rounds`` rounds on a
manual clock 10 s apart, as it would over that much time:

- *round*: the wall time of ``sample_once()`` (read the handles, ask the executor, derive,
  average the buckets that closed, then one write transaction: the samples, the roll-ups, the
  pruning), median and worst, and the worst of the rounds in which a bucket closed;
- *write*: the time inside that one write transaction, which on SQLite holds the writer lock
  the reconcile loop and the API need too: median and worst;
- *floor*: one transaction inserting the same number of rows with one executemany, the least
  any design that stores every sample can cost, measured in the same run on the same store;
- *rows*: the points kept per table and level at the end, against what retention allows.

No figure is asserted. Run it as ``.venv/bin/python bench/usage.py`` (``--workers 200 --rounds
400`` for a quick look; the default simulates 2 hours of a 1,000-worker pool).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec
from gpuyard.models.usage import RESOLUTIONS
from gpuyard.models.worker import NodeInfo
from gpuyard.services.accounts import AccountService
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeUsageRow, WorkerUsageRow

T0 = 1_699_999_200.0  # the start of an hour


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=720, help="10-s rounds (720: 2 hours)")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        store = Store(url)
        store.migrate()
        try:
            run(store, args.workers, args.rounds)
        finally:
            store.close()


class TimedWrites:
    """The store, with the time spent in each write transaction recorded."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writes: list[float] = []

    def read(self) -> object:
        return self.store.read()

    @contextmanager
    def write(self) -> Iterator[Session]:
        began = time.perf_counter()
        with self.store.write() as session:
            yield session
        self.writes.append(time.perf_counter() - began)


def run(store: Store, workers: int, rounds: int) -> None:
    clock = ManualClock(T0)
    nodes = [NodeInfo(f"n{i}", f"10.{i >> 8}.{i & 255}.1", 1, 8, 1 << 36) for i in range(workers)]
    executor = FakeExecutor(nodes)
    controller = Controller(store, executor, clock=clock)
    controller.register_nodes()
    jobs = JobService(store, clock=clock, accounts=AccountService(store, clock=clock))
    spec = JobSpec.model_validate({"command": "python train.py", "resources": {"gpus": 1}})
    ids = [j.id for j in jobs.submit_many([spec] * workers, owner="bench")]
    for _ in range(4):
        controller.tick()
    print(f"{store.dialect}: {workers} running workers on {workers} nodes, {rounds} rounds")
    timed = TimedWrites(store)
    controller.sampler.store = timed  # type: ignore[assignment]

    times, due = [], []
    for i in range(rounds):
        for job in ids:
            executor.use(job, cpu_seconds=i * 15.0, memory=(1 << 30) + i, gpu_util=50.0)
        began = time.perf_counter()
        controller.sampler.sample_once()
        took = time.perf_counter() - began
        times.append(took)
        if i and clock.now() % 60 == 0:
            due.append(took)
        clock.advance(10)

    rows = [{"node": f"floor{i}", "level": 0, "t": 0.0, "samples": 1} for i in range(2 * workers)]
    began = time.perf_counter()
    with store.write() as session:
        session.execute(insert(NodeUsageRow.__table__), rows)
    floor = time.perf_counter() - began

    ms = 1000.0
    print(f"  round: median {statistics.median(times) * ms:.1f} ms, worst {max(times) * ms:.1f} ms")
    print(f"  rounds where a bucket closed: worst {max(due or [0.0]) * ms:.1f} ms")
    writes = timed.writes
    print(
        f"  write: median {statistics.median(writes) * ms:.1f} ms, worst {max(writes) * ms:.1f} ms"
    )
    print(f"  floor (one executemany of {2 * workers} rows): {floor * ms:.1f} ms")
    with store.read() as session:
        for table in (WorkerUsageRow, NodeUsageRow):
            counts = dict(
                session.execute(
                    select(table.level, func.count()).where(table.t > 0).group_by(table.level)
                ).all()
            )
            kept = ", ".join(
                f"level {r.level}: {counts.get(r.level, 0)} (at most {workers * r.points(10.0)})"
                for r in RESOLUTIONS
            )
            print(f"  {table.__tablename__}: {kept}")


if __name__ == "__main__":
    main()
