"""Hang detection in the reconcile loop, against the fake executor with a manual clock.

A job is hung when no worker reports progress or writes to its log for its ``hang_timeout``;
until an attempt first reports progress it is starting (imports, rendezvous, loading a
checkpoint), which is silent and slow, and only ``HANG_START`` of silence counts. A hung job's
workers are killed at once, not after its graceful period.
"""

from __future__ import annotations

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.controller.recovery import HANG_START
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.worker import NodeInfo, WorkerKey
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.testing.auth import OPS, ensure_ops

TIMEOUT = 10.0


class Pool:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.clock = clock
        self.executor = FakeExecutor([NodeInfo("n0", "10.0.0.1", gpus=1, cpus=8, memory=1 << 34)])
        self.controller = Controller(store, self.executor, clock=clock, control_url="http://cp")
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        ensure_ops(store)

    def submit(self) -> int:
        spec = {
            "command": "python train.py",
            "graceful_shutdown": 30,
            "fault_tolerance": {"hang_timeout": TIMEOUT},
        }
        job_id = self.jobs.submit(JobSpec.model_validate(spec), owner="alice").id
        self.controller.tick()
        assert self.state(job_id) is JobState.RUNNING
        return job_id

    def state(self, job_id: int) -> JobState:
        return self.jobs.get(job_id, actor=OPS).state

    def wait(self, job_id: int, seconds: float) -> None:
        """Let ``seconds`` pass, one tick a second, as the loop would."""
        for _ in range(round(seconds)):
            self.clock.advance(1.0)
            self.controller.tick()

    def hangs(self, job_id: int) -> list[str]:
        return [f.evidence for f in self.jobs.faults(job_id, actor=OPS) if f.kind == "hang"]


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, clock)


def test_a_silent_start_longer_than_the_timeout_is_not_a_hang(pool: Pool) -> None:
    job_id = pool.submit()
    pool.wait(job_id, HANG_START - 5)  # importing, meeting its peers, loading: no word yet
    assert pool.state(job_id) is JobState.RUNNING
    assert pool.hangs(job_id) == []
    pool.executor.report(job_id, progress_at=pool.clock.now())  # its first step
    pool.wait(job_id, TIMEOUT - 2)
    assert pool.state(job_id) is JobState.RUNNING


def test_a_start_that_never_reports_is_a_hang_after_the_start_allowance(pool: Pool) -> None:
    job_id = pool.submit()
    pool.wait(job_id, HANG_START + 3)
    assert pool.state(job_id) is not JobState.RUNNING
    [evidence] = pool.hangs(job_id)
    assert "before the first progress report" in evidence


def test_once_it_has_reported_the_hang_timeout_alone_applies(pool: Pool) -> None:
    job_id = pool.submit()
    pool.wait(job_id, 5)
    pool.executor.report(job_id, progress_at=pool.clock.now())
    pool.wait(job_id, 2)
    assert pool.state(job_id) is JobState.RUNNING
    pool.wait(job_id, TIMEOUT + 1)  # then nothing: no report, no log
    assert pool.state(job_id) is not JobState.RUNNING
    [evidence] = pool.hangs(job_id)
    assert "(hang_timeout 10s)" in evidence


def test_a_hung_job_is_killed_at_once_and_restarted(pool: Pool) -> None:
    job_id = pool.submit()
    pool.executor.report(job_id, progress_at=pool.clock.now())
    pool.wait(job_id, TIMEOUT + 2)
    hung = pool.executor.workers[WorkerKey(job_id, 0, 0)]
    assert hung.terminated_with_grace == 0.0  # not the job's 30 s: it cannot use them
    pool.wait(job_id, 2)
    job = pool.jobs.get(job_id, actor=OPS)
    assert job.attempt == 1
    assert job.state in (JobState.STARTING, JobState.RUNNING)  # its nodes re-checked first
