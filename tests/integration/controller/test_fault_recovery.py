"""The fault-tolerance loop in the controller, against the fake executor with a manual clock, on
both databases: restart in place after a re-check, a check that cordons, resume or from
scratch, hangs and slowness found by the clock. (The same loop with real processes, torch and
gloo is tests/e2e/test_fault_tolerance.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.launch.check import CHECK_RANK_BASE
from gpuyard.models import JobSpec, JobState, NodeState
from gpuyard.models.worker import NodeInfo
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, NodeRow
from gpuyard.testing.auth import OPS, ensure_ops

NODES = [
    NodeInfo("n0", "10.0.0.1", gpus=1, cpus=8, memory=1 << 35),
    NodeInfo("n1", "10.0.0.2", gpus=1, cpus=8, memory=1 << 35),
]
CUDA = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"


class Pool:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.store, self.clock = store, clock
        self.executor = FakeExecutor(NODES)
        self.alerts: list[dict[str, Any]] = []
        self.controller = Controller(store, self.executor, clock=clock, alert=self.alerts.append)
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        ensure_ops(store)

    def submit(self, **ft: object) -> int:
        spec = {"command": "python train.py", "mode": "pytorch", "nodes": 2}
        spec["resources"] = {"gpus": 1}
        spec["fault_tolerance"] = ft
        return self.jobs.submit(JobSpec.model_validate(spec), owner="alice").id

    def job(self, job_id: int) -> JobRow:
        with self.store.read() as session:
            row = session.get(JobRow, job_id)
            assert row is not None
            return row

    def ticks(self, n: int = 3) -> None:
        for _ in range(n):
            self.controller.tick()

    def faults(self, job_id: int) -> list[Any]:
        return self.jobs.faults(job_id, actor=OPS)

    def launched(self, attempt: int) -> list[tuple[int, str]]:
        return sorted(
            (launch.key.rank, launch.node)
            for launch in self.executor.launches
            if launch.key.attempt == attempt
        )


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, clock)


def fail_rank_1(pool: Pool, job_id: int, attempt: int = 0) -> None:
    pool.executor.write_log(job_id, CUDA, rank=1, attempt=attempt)
    pool.executor.exit(job_id, rank=1, code=1, attempt=attempt)


def test_a_node_fault_restarts_in_place_after_the_nodes_pass_a_check(pool: Pool) -> None:
    job_id = pool.submit(max_restarts=1)
    pool.ticks()
    assert pool.job(job_id).state is JobState.RUNNING
    fail_rank_1(pool, job_id)
    pool.ticks()
    job = pool.job(job_id)
    assert (job.state, job.attempt, job.restarts) == (JobState.STARTING, 1, 1)
    checks = [(CHECK_RANK_BASE, "n0"), (CHECK_RANK_BASE + 1, "n1")]
    assert pool.launched(1) == checks  # the check first, the job's own workers after
    for rank, _ in checks:
        pool.executor.exit(job_id, rank=rank, code=0, attempt=1)
    pool.ticks()
    assert pool.job(job_id).state is JobState.RUNNING
    assert pool.launched(1) == [(0, "n0"), (1, "n1"), *checks]
    env = next(w.env for w in pool.executor.launches if (w.key.attempt, w.key.rank) == (1, 0))
    assert (env["GPUYARD_ATTEMPT"], env["GPUYARD_RESUME"]) == ("1", "1")
    (entry,) = pool.faults(job_id)
    assert (entry.kind, entry.suspect, entry.rank, entry.node) == ("failure", "node", 1, "n1")
    assert entry.cause == "CUDA fatal error"
    assert entry.outcome == "running again on n0, n1 as attempt 1"

    fail_rank_1(pool, job_id, attempt=1)  # the budget is spent now
    pool.ticks()
    job = pool.job(job_id)
    assert (job.state, job.restarts) == (JobState.FAILED, 1)
    assert "budget is spent (1 of 1)" in pool.faults(job_id)[-1].action


def test_a_check_that_blames_a_node_cordons_it_and_the_job_waits_for_another(pool: Pool) -> None:
    job_id = pool.submit(max_restarts=2, recovery="restart")
    pool.ticks()
    fail_rank_1(pool, job_id)
    pool.ticks()
    pool.executor.exit(job_id, rank=CHECK_RANK_BASE, code=0, attempt=1)
    blame = b"gpuyard-check: FAILED node=n1 test=burn cuda:0: product 1 differs from the first\n"
    pool.executor.write_log(job_id, blame, rank=CHECK_RANK_BASE + 1, attempt=1)
    pool.executor.exit(job_id, rank=CHECK_RANK_BASE + 1, code=86, attempt=1)
    pool.ticks()
    job = pool.job(job_id)
    assert (job.state, job.attempt, job.check_failures, job.placement) == (
        JobState.SUSPENDED,
        2,
        1,
        None,
    )
    assert not job.resume  # recovery: restart, from scratch
    with pool.store.read() as session:
        node = session.scalars(select(NodeRow).where(NodeRow.name == "n1")).one()
        assert (node.state, node.cordoned_by) == (NodeState.CORDONED, f"check:job {job_id}")
        assert "product 1 differs" in (node.cordon_reason or "")
    assert [(f.kind, f.node) for f in pool.faults(job_id)] == [("failure", "n1"), ("check", "n1")]
    assert pool.launched(1) == [(CHECK_RANK_BASE, "n0"), (CHECK_RANK_BASE + 1, "n1")]


def test_a_job_that_stops_progressing_hangs_after_its_timeout(pool: Pool) -> None:
    job_id = pool.submit(max_restarts=1, hang_timeout=30)
    pool.ticks()
    for step in range(1, 5):  # progressing: never a hang
        pool.clock.advance(10)
        pool.executor.report(job_id, progress_at=pool.clock.now(), step=step)
        pool.ticks(1)
    assert pool.job(job_id).state is JobState.RUNNING
    pool.clock.advance(20)
    pool.ticks(1)
    assert pool.job(job_id).state is JobState.RUNNING  # quiet for 20 s of 30
    pool.clock.advance(12)
    pool.ticks(1)
    assert pool.job(job_id).state in (JobState.RECOVERING, JobState.STARTING)
    (hang,) = pool.faults(job_id)
    assert (hang.kind, hang.cause) == ("hang", "hang")
    assert "no worker reported progress or wrote to its log for" in hang.evidence


def test_a_slow_job_gets_one_alert_per_attempt_and_goes_on(pool: Pool) -> None:
    job_id = pool.submit(performance={"window": 10, "threshold": 0.5})
    pool.ticks()
    step = 0
    for second in range(60):
        step += 10 if second < 45 else 2  # 10 steps/s, then 2
        pool.clock.advance(1)
        pool.executor.report(job_id, progress_at=pool.clock.now(), step=step)
        pool.ticks(1)
    assert pool.job(job_id).state is JobState.RUNNING
    (slow,) = pool.faults(job_id)
    assert (slow.kind, slow.action) == ("performance", "alert")
    assert "step rate over the last 10 s is" in slow.evidence
    assert "of its usual 10 steps/s" in slow.evidence
    assert [(a["job"], a["kind"]) for a in pool.alerts] == [(job_id, "performance")]


def test_a_checkpoint_being_saved_holds_the_hang_timer_for_a_while_not_forever(
    pool: Pool,
) -> None:
    job_id = pool.submit(max_restarts=1, hang_timeout=30)
    pool.ticks()
    pool.executor.report(job_id, saving_at=pool.clock.now())
    for _ in range(10):  # 100 s quiet, saving: within 4 x 30 s
        pool.clock.advance(10)
        pool.ticks(1)
    assert pool.job(job_id).state is JobState.RUNNING
    pool.clock.advance(30)  # 130 s: a save that never ends is a hang too
    pool.ticks(1)
    assert pool.job(job_id).state is not JobState.RUNNING
    assert [f.kind for f in pool.faults(job_id)] == ["hang"]


def test_a_restart_counts_the_attempt_that_ran_as_service_not_as_waiting(pool: Pool) -> None:
    job_id = pool.submit(max_restarts=1)
    pool.ticks()
    pool.clock.advance(100)
    fail_rank_1(pool, job_id)
    pool.ticks()
    job = pool.job(job_id)
    assert job.state is JobState.STARTING
    assert (job.ran, job.attained) == (100.0, 200.0)  # 2 workers x 1 GPU x 100 s
