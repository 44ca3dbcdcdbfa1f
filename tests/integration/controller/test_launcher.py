"""Workers are launched beside the reconcile loop; a job being launched is left alone by the
loop until its launch is over, so a stop that comes meanwhile ends every launched worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gpuyard.clock import SystemClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.worker import NodeInfo, WorkerLaunch, WorkerState
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.testing.auth import OPS, ensure_ops


def _until(what: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_stop_during_the_launch_ends_every_launched_worker(store: Store) -> None:
    entered, gate = threading.Event(), threading.Event()

    def hold(_launch: WorkerLaunch) -> None:
        entered.set()
        assert gate.wait(10)

    executor = FakeExecutor(
        [NodeInfo("n0", "10.0.0.1", gpus=8, cpus=8, memory=1 << 34)], before_launch=hold
    )
    controller = Controller(store, executor, clock=SystemClock(), interval=0.02)
    jobs = JobService(store, clock=SystemClock(), notify=controller.notify)
    ensure_ops(store)
    controller.start()
    try:
        job = jobs.submit(JobSpec.model_validate({"command": "train", "nodes": 1}), owner="a")
        assert entered.wait(10)  # the launcher holds the launch of its worker
        assert jobs.get(job.id, actor=OPS).state is JobState.STARTING
        jobs.stop(job.id, actor="a")
        time.sleep(0.3)  # many passes of the loop
        # Not ended while its worker may be starting that moment.
        assert jobs.get(job.id, actor=OPS).state is JobState.STOPPING
        gate.set()
        _until(lambda: jobs.get(job.id, actor=OPS).state is JobState.STOPPED)
        assert all(w.status.state is not WorkerState.RUNNING for w in executor.workers.values())
        assert [w.terminated_with_grace for w in executor.workers.values()] == [30.0]
    finally:
        gate.set()
        controller.stop()


def test_launches_do_not_hold_up_the_loop(store: Store) -> None:
    """While one job's launch hangs, another job is placed and launched."""
    gate = threading.Event()

    def hold_first(launch: WorkerLaunch) -> None:
        if launch.key.job_id == first.id:
            assert gate.wait(10)

    executor = FakeExecutor(
        [NodeInfo("n0", "10.0.0.1", gpus=8, cpus=8, memory=1 << 34)], before_launch=hold_first
    )
    controller = Controller(store, executor, clock=SystemClock(), interval=0.02)
    jobs = JobService(store, clock=SystemClock(), notify=controller.notify)
    ensure_ops(store)
    spec = JobSpec.model_validate({"command": "train", "resources": {"gpus": 1}})
    controller.start()
    try:
        first = jobs.submit(spec, owner="a")
        _until(lambda: jobs.get(first.id, actor=OPS).state is JobState.STARTING)
        second = jobs.submit(spec, owner="b")
        _until(lambda: jobs.get(second.id, actor=OPS).state is JobState.RUNNING)
        assert jobs.get(first.id, actor=OPS).state is JobState.STARTING
        gate.set()
        _until(lambda: jobs.get(first.id, actor=OPS).state is JobState.RUNNING)
    finally:
        gate.set()
        controller.stop()
