"""The controller's usage sampler on both databases: samples stored per worker and node, CPU
derived in cores, coarser resolutions rolled up as buckets close, retention bounded, series
deleted with their job, and one job that breaks the executor costs only its own samples."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec
from gpuyard.models.usage import NodeUsage, Window
from gpuyard.models.worker import NodeInfo
from gpuyard.services.accounts import AccountService
from gpuyard.services.jobs import JobService
from gpuyard.services.usage import UsageService
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeUsageRow, WorkerUsageRow
from gpuyard.testing.auth import OPS, ensure_ops

T0 = 1_699_999_200.0  # the start of an hour
MiB = 1 << 20
NODES = [NodeInfo(f"n{i}", f"10.0.0.{i}", gpus=4, cpus=16, memory=1 << 36) for i in range(3)]


class Pool:
    def __init__(self, store: Store, *, interval: float = 10.0) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.executor = FakeExecutor(NODES)
        self.controller = Controller(
            store, self.executor, clock=self.clock, usage_interval=interval
        )
        self.controller.register_nodes()
        accounts = AccountService(store, clock=self.clock)
        self.jobs = JobService(store, clock=self.clock, accounts=accounts)
        ensure_ops(store)
        self.usage = UsageService(
            store, clock=self.clock, policy=accounts.policy, interval=interval
        )
        self.interval = interval

    def run(self, nodes: int = 1, gpus: int = 4) -> int:
        spec = JobSpec.model_validate(
            {"command": "python train.py", "nodes": nodes, "resources": {"gpus": gpus}}
        )
        [job] = self.jobs.submit_many([spec], owner="alice")
        self.controller.tick()
        self.controller.tick()
        assert self.jobs.get(job.id, actor=OPS).state.value == "running"
        return job.id

    def sample(self) -> int:
        return self.controller.sampler.sample_once()

    def count(self, table: type[WorkerUsageRow] | type[NodeUsageRow], level: int) -> int:
        with self.store.read() as session:
            return (
                session.scalar(select(func.count()).select_from(table).where(table.level == level))
                or 0
            )


@pytest.fixture
def pool(store: Store) -> Pool:
    return Pool(store)


def test_samples_per_worker_and_node_with_cpu_in_cores(pool: Pool) -> None:
    job = pool.run(nodes=2)
    placed = {w.rank: w.node for w in pool.jobs.get(job, actor=OPS).workers}
    pool.executor.use(job, 0, cpu_seconds=100.0, memory=512 * MiB)
    pool.executor.use(job, 1, cpu_seconds=7.0, memory=256 * MiB, gpu_util=90.0, gpu_memory=MiB)
    assert pool.sample() == 2 + 3  # two workers, three nodes
    pool.clock.advance(10)
    pool.executor.use(job, 0, cpu_seconds=120.0, memory=512 * MiB)  # 2 cores
    pool.executor.use(job, 1, cpu_seconds=12.0, memory=256 * MiB, gpu_util=70.0, gpu_memory=MiB)
    pool.sample()

    usage = pool.usage.job(job, actor="alice", window=Window.REALTIME)
    assert usage.step == 10 and usage.since.timestamp() == T0 + 10 - 590
    series = {
        (w.rank, w.node): [(p.cpu, p.memory, p.gpu_util) for p in w.points] for w in usage.workers
    }
    assert series == {
        (0, placed[0]): [(None, 512 * MiB, None), (2.0, 512 * MiB, None)],  # no GPU measured
        (1, placed[1]): [(None, 256 * MiB, 90.0), (0.5, 256 * MiB, 70.0)],
    }
    # The fake executor measures no node whole (as with virtual nodes): its workers add up.
    node = pool.usage.node(placed[0], window=Window.REALTIME)
    assert [(p.cpu, p.memory) for p in node.points] == [(None, 512 * MiB), (2.0, 512 * MiB)]
    idle = next(n.name for n in NODES if n.name not in placed.values())
    assert [
        (p.cpu, p.memory, p.gpu_util) for p in pool.usage.node(idle, window=Window.REALTIME).points
    ] == [
        (0.0, 0, None),
        (0.0, 0, None),
    ]
    latest = pool.usage.latest()
    assert latest.jobs[job].cpu == 2.5 and latest.jobs[job].gpu_util == 70.0


def test_a_node_measured_whole_is_not_its_workers_sum(pool: Pool) -> None:
    pool.executor.use_node("n0", NodeUsage(cpu_seconds=1000.0, memory=3 << 30, gpu_util=55.0))
    pool.sample()
    pool.clock.advance(10)
    pool.executor.use_node("n0", NodeUsage(cpu_seconds=1040.0, memory=3 << 30, gpu_util=65.0))
    pool.sample()
    points = pool.usage.node("n0", window=Window.REALTIME).points
    assert [(p.cpu, p.memory, p.gpu_util) for p in points] == [
        (None, 3 << 30, 55.0),
        (4.0, 3 << 30, 65.0),
    ]


def test_a_counter_that_goes_back_starts_a_new_count(pool: Pool) -> None:
    job = pool.run()
    for seconds in (50.0, 60.0, 5.0, 15.0):  # processes ended between the 2nd and 3rd
        pool.executor.use(job, cpu_seconds=seconds, memory=MiB)
        pool.sample()
        pool.clock.advance(10)
    [worker] = pool.usage.job(job, actor="alice", window=Window.REALTIME).workers
    assert [p.cpu for p in worker.points] == [None, 1.0, None, 1.0]


def test_two_hours_roll_up_into_every_window_with_bounded_retention(store: Store) -> None:
    pool = Pool(store, interval=30.0)
    job = pool.run()
    cpu = 0.0
    rounds = int((2 * 3600 + 300) / 30)  # 2 h 5 min
    for i in range(rounds):
        pool.executor.use(job, cpu_seconds=cpu, memory=(100 + 2 * (i % 2)) * MiB)
        pool.sample()
        cpu += 45.0  # 1.5 cores
        pool.clock.advance(30)
    views = {w: pool.usage.job(job, actor="alice", window=w) for w in Window}
    points = {w: v.workers[0].points for w, v in views.items()}
    # A view ends at the last bucket that closed: the current one has no sample yet.
    assert len(points[Window.REALTIME]) == 19  # 10 minutes of 30-s samples
    assert len(points[Window.HOUR]) == 58
    assert len(points[Window.DAY]) == 8  # eight closed quarter hours
    assert len(points[Window.WEEK]) == 2
    for window, step, samples in (
        (Window.HOUR, 60, 2),
        (Window.DAY, 900, 30),
        (Window.WEEK, 3600, 120),
    ):
        assert views[window].step == step
        for p in points[window]:
            assert p.samples == samples, window
            assert p.cpu == pytest.approx(1.5), window  # the first sample's None is not a 0
            assert p.memory == 101 * MiB, window  # 100 and 102 MiB alternately
            assert p.gpu_util is None
    assert [p.time.timestamp() for p in points[Window.WEEK]] == [T0, T0 + 3600]
    # Nothing beyond what the windows show is kept.
    assert pool.count(WorkerUsageRow, 0) == 20
    assert pool.count(WorkerUsageRow, 1) <= 60
    assert pool.count(NodeUsageRow, 0) == 20 * len(NODES)

    # A controller started again over the same store rolls up without a second copy.
    restarted = Controller(store, pool.executor, clock=pool.clock, usage_interval=30.0)
    for _ in range(4):
        restarted.sampler.sample_once()
        pool.clock.advance(30)
    assert len(pool.usage.job(job, actor="alice", window=Window.DAY).workers[0].points) == 8
    assert pool.count(WorkerUsageRow, 3) == 2


def test_a_round_run_twice_in_one_bucket_stores_one_sample(pool: Pool) -> None:
    job = pool.run()
    pool.executor.use(job, cpu_seconds=1.0, memory=MiB)
    assert pool.sample() == 1 + 3
    pool.clock.advance(3)
    assert pool.sample() == 0
    assert pool.count(WorkerUsageRow, 0) == 1


def test_deleting_a_job_deletes_its_series(pool: Pool) -> None:
    job = pool.run()
    pool.executor.use(job, cpu_seconds=1.0, memory=MiB)
    pool.sample()
    assert pool.count(WorkerUsageRow, 0) == 1
    pool.jobs.stop(job, actor="alice")
    for _ in range(3):
        pool.controller.tick()
    pool.jobs.delete(job, actor="alice")
    assert pool.count(WorkerUsageRow, 0) == 0
    assert pool.count(NodeUsageRow, 0) == 3  # the nodes' series stay


def test_a_job_that_breaks_the_executor_loses_only_its_own_samples(pool: Pool) -> None:
    broken, fine = pool.run(), pool.run()
    pool.executor.use(broken, cpu_seconds=1.0, memory=MiB)
    pool.executor.use(fine, cpu_seconds=1.0, memory=2 * MiB)
    pool.executor.broken[broken] = "a handle the executor chokes on"
    assert pool.sample() == 1 + 3
    assert pool.usage.job(broken, actor="alice", window=Window.REALTIME).workers == []
    [worker] = pool.usage.job(fine, actor="alice", window=Window.REALTIME).workers
    assert worker.points[0].memory == 2 * MiB


def test_a_stale_sample_is_not_now(pool: Pool) -> None:
    job = pool.run()
    pool.executor.use(job, cpu_seconds=1.0, memory=MiB)
    pool.sample()
    assert set(pool.usage.latest().jobs) == {job}
    pool.clock.advance(3 * pool.interval + 1)  # the sampler stopped
    latest = pool.usage.latest()
    assert (latest.jobs, latest.nodes) == ({}, {})
