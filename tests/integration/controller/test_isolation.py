"""One job's failure stays that job's: poison jobs against the real loop, on both databases.

Each poison job breaks a different piece of a pass (reading its workers, reading its runtime's
reports, loading its stored spec). Other users' jobs must keep starting and ending, the poison
job must end ``failed`` with the error as its reason, and the loop must report its errors
without going quiet or spinning.
"""

from __future__ import annotations

import itertools
import time

import pytest
from sqlalchemy import update

from gpuyard.clock import ManualClock, SystemClock
from gpuyard.controller.health import GIVE_UP_AFTER, RETRY_AFTER_MAX
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.worker import NodeInfo
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow
from gpuyard.testing.auth import OPS, ensure_ops

NODES = [NodeInfo("n0", "10.0.0.1", gpus=4, cpus=8, memory=1 << 35)]


class Pool:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.store, self.clock = store, clock
        self.executor = FakeExecutor(NODES)
        self.controller = Controller(store, self.executor, clock=clock, stall_after=30)
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        ensure_ops(store)

    def submit(self, owner: str = "alice", **spec: object) -> int:
        spec.setdefault("command", "python train.py")
        spec.setdefault("resources", {"gpus": 1})
        return self.jobs.submit(JobSpec.model_validate(spec), owner=owner).id

    def passes(self, n: int) -> None:
        """``n`` passes, close together (a job whose work failed rests meanwhile)."""
        for _ in range(n):
            self.controller.tick()
            self.clock.advance(0.1)

    def exhaust(self) -> None:
        """Passes, each after the longest retry delay, until a poison job is given up."""
        for _ in range(GIVE_UP_AFTER * 2):
            self.controller.tick()
            self.clock.advance(RETRY_AFTER_MAX + 0.1)

    def state(self, job_id: int) -> JobState:
        return self.jobs.get(job_id, actor=OPS).state

    def events(self, job_id: int, kind: str) -> list[str]:
        return [e.reason for e in self.jobs.events(job_id, actor=OPS) if e.kind == kind]


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, clock)


def _others_keep_going(pool: Pool) -> None:
    """Bob's jobs start and end while the poison job is around (a queued poison job may take
    the room of one cycle before its start fails; the next cycle goes without it)."""
    first = pool.submit(owner="bob")
    pool.passes(2)
    assert pool.state(first) is JobState.RUNNING
    pool.executor.exit(first, code=0)
    second = pool.submit(owner="bob")
    pool.passes(2)
    assert pool.state(first) is JobState.SUCCEEDED
    assert pool.state(second) is JobState.RUNNING
    pool.jobs.stop(second, actor=OPS)
    pool.passes(2)
    assert pool.state(second) is JobState.STOPPED


@pytest.mark.parametrize("broken", ["status", "control"])
def test_a_job_whose_workers_break_the_executor_fails_alone(pool: Pool, broken: str) -> None:
    poison = pool.submit()
    pool.passes(1)
    assert pool.state(poison) is JobState.RUNNING
    pool.executor.broken[poison] = "garbage in the worker directory"
    if broken == "control":  # only the control files break: status still answers
        status = pool.executor.status
        pool.executor.status = lambda handles: (  # type: ignore[method-assign]
            [pool.executor._worker(h).status for h in handles]
        )
    _others_keep_going(pool)
    pool.exhaust()
    job = pool.jobs.get(poison, actor=OPS)
    assert job.state is JobState.FAILED
    assert job.reason is not None
    assert job.reason.startswith("the controller gave up on this job: reading its workers'")
    assert "garbage in the worker directory" in job.reason
    errors = pool.events(poison, "controller_error")
    assert len(errors) == GIVE_UP_AFTER
    assert errors[-1].endswith("giving up on the job")
    assert pool.executor.workers[next(iter(pool.executor.workers))].killed
    if broken == "control":
        pool.executor.status = status  # type: ignore[method-assign]
    health = pool.controller.health()
    assert any(e["job"] == poison for e in health["recent_errors"])


def test_a_queued_job_whose_spec_no_longer_loads_fails_alone(pool: Pool) -> None:
    poison = pool.submit(resources={"gpus": 4})
    with pool.store.write() as session:  # as if stored by an older version with other rules
        session.execute(
            update(JobRow)
            .where(JobRow.id == poison)
            .values(spec={"command": "python train.py", "resources": {"gpus": "many"}})
        )
    _others_keep_going(pool)
    pool.exhaust()
    job = pool.jobs.get(poison, actor=OPS)
    assert job.state is JobState.FAILED
    assert job.reason is not None and "starting it: ValidationError" in job.reason
    assert pool.executor.launches[-1].key.job_id != poison


def test_a_job_whose_row_cannot_be_read_holds_its_nodes(pool: Pool) -> None:
    """A running job the loader cannot read must not have its room handed out twice."""
    poison = pool.submit(resources={"gpus": 4})
    pool.passes(1)
    assert pool.state(poison) is JobState.RUNNING
    with pool.store.write() as session:
        session.execute(update(JobRow).where(JobRow.id == poison).values(priority="urgent!"))
    waiting = pool.submit(owner="bob", resources={"gpus": 1})
    pool.passes(2)
    assert pool.state(waiting) is JobState.QUEUED  # n0 still counts as taken
    assert any(e["job"] == poison for e in pool.controller.health()["recent_errors"])


def test_a_failing_pass_backs_off_and_health_says_stalled(store: Store) -> None:
    controller = Controller(
        store, FakeExecutor(NODES), clock=SystemClock(), interval=0.05, stall_after=0.5
    )
    tries: list[float] = []
    working = controller.applier.run

    def broken() -> None:
        tries.append(time.monotonic())
        raise RuntimeError("database is gone")

    controller.applier.run = broken  # type: ignore[method-assign]
    controller.start()
    try:
        deadline = time.monotonic() + 1.6
        while time.monotonic() < deadline:
            controller.notify()  # a busy API keeps waking it
            time.sleep(0.01)
        health = controller.health()
        assert not health["progressing"]
        assert health["failed_passes"] >= 3
        assert health["recent_errors"][-1]["error"] == "RuntimeError: database is gone"
        # Waits of 0.05, 0.1, 0.2, 0.4, 0.8 s: a handful of tries, not one per wake-up.
        assert len(tries) <= 7
        gaps = [b - a for a, b in itertools.pairwise(tries)]
        assert gaps == sorted(gaps) or len(gaps) < 2
        controller.applier.run = working  # type: ignore[method-assign]
        deadline = time.monotonic() + 5
        while not controller.health()["progressing"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert controller.health()["progressing"]
    finally:
        controller.stop()
