"""Jobs that wait for other jobs, and held jobs, through the real loop and store (fake
executor, manual clock, both databases)."""

from __future__ import annotations

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict, InvalidSpec
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.worker import NodeInfo
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.testing.auth import OPS, ensure_ops


class Pool:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.clock = clock
        self.executor = FakeExecutor([NodeInfo("n0", "10.0.0.1", gpus=8, cpus=64, memory=1 << 36)])
        self.controller = Controller(store, self.executor, clock=clock)
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        ensure_ops(store)

    def submit(self, owner: str = "alice", **spec: object) -> int:
        spec.setdefault("command", "python train.py")
        return self.jobs.submit(JobSpec.model_validate(spec), owner=owner).id

    def view(self, job_id: int) -> tuple[JobState, str | None, str | None]:
        job = self.jobs.get(job_id, actor=OPS)
        return job.state, job.wait_code, job.reason

    def tick(self) -> None:
        self.clock.advance(3)  # a waiting job's reason is reworded every 2 s at most
        self.controller.tick()
        self.controller.tick()


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, clock)


def test_a_job_waits_for_another_to_succeed_then_starts(pool: Pool) -> None:
    first = pool.submit()
    second = pool.submit(after=[{"job": first}])
    started = pool.submit(after=[{"job": first, "when": "started"}])
    pool.tick()
    assert pool.view(first)[0] is JobState.RUNNING
    assert pool.view(started)[0] is JobState.RUNNING  # `after`: once the other started
    assert pool.view(second) == (
        JobState.QUEUED,
        "dependency",
        f"waiting for job {first} to succeed",
    )
    pool.executor.exit(first, code=0)
    pool.tick()
    assert pool.view(second)[0] is JobState.RUNNING


def test_a_dependency_that_can_never_hold_says_so(pool: Pool) -> None:
    first = pool.submit()
    ok = pool.submit(after=[{"job": first, "when": "succeeded"}])
    notok = pool.submit(after=[{"job": first, "when": "failed"}])
    anyway = pool.submit(after=[{"job": first, "when": "ended"}])
    pool.tick()
    pool.executor.exit(first, code=3)
    pool.tick()
    assert pool.view(first)[0] is JobState.FAILED
    state, code, reason = pool.view(ok)
    assert (state, code) == (JobState.QUEUED, "dependency")
    assert reason == (
        f"can never start: job {first} ended failed, and this job waits for it to succeed"
    )
    assert pool.view(notok)[0] is JobState.RUNNING
    assert pool.view(anyway)[0] is JobState.RUNNING


def test_hold_and_release(pool: Pool) -> None:
    held = pool.submit(hold=True, resources={"gpus": 8})
    pool.tick()
    assert pool.view(held)[:2] == (JobState.QUEUED, "held")
    assert pool.jobs.get(held, actor=OPS).on_hold
    pool.jobs.hold(held, actor="alice", held=False)
    pool.tick()
    assert pool.view(held)[0] is JobState.RUNNING
    with pytest.raises(Conflict, match="only a queued, suspending or suspended job can be held"):
        pool.jobs.hold(held, actor="alice")
    waiting = pool.submit(resources={"gpus": 8})  # no room: it waits, then is held
    pool.tick()
    pool.jobs.hold(waiting, actor="alice")
    pool.executor.exit(held, code=0)
    pool.tick()
    assert pool.view(waiting)[:2] == (JobState.QUEUED, "held")


def test_many_jobs_are_held_and_released_in_one_call(pool: Pool) -> None:
    ids = [pool.submit(hold=True, resources={"gpus": 2}) for _ in range(3)]
    running = pool.submit(resources={"gpus": 2})
    theirs = pool.submit(owner="bob", hold=True)
    pool.tick()
    result = pool.jobs.hold_many([*ids, running, theirs, 999], actor="alice", held=False)
    assert result.done == ids
    assert {f.id: f.code for f in result.failed} == {
        running: "conflict",
        theirs: "not_found",  # alice may not see it
        999: "not_found",
    }
    pool.tick()
    assert [pool.view(i)[0] for i in ids] == [JobState.RUNNING] * 3
    assert pool.view(theirs)[1] == "held"


def test_a_job_may_wait_only_for_jobs_its_owner_can_see(pool: Pool) -> None:
    theirs = pool.submit(owner="bob")
    with pytest.raises(InvalidSpec, match="after: job 999 does not exist, or you may not see"):
        pool.submit(after=[{"job": 999}])
    with pytest.raises(InvalidSpec, match=f"after: job {theirs} does not exist"):
        pool.submit(after=[{"job": theirs}])
    assert pool.submit(owner="bob", after=[{"job": theirs}]) > theirs
