"""The reconcile loop against the fake executor, with a manual clock, on both databases."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpuyard.clock import ManualClock
from gpuyard.controller.apply import NodeFacts
from gpuyard.controller.loop import Controller
from gpuyard.errors import InvalidSpec
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.worker import NodeInfo, WorkerKey
from gpuyard.scheduler.decide import Start
from gpuyard.scheduler.snapshot import Allocation
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow
from gpuyard.testing.auth import OPS, ensure_ops

TWO_NODES = [
    NodeInfo("n0", "10.0.0.1", gpus=4, cpus=8, memory=1 << 35, gpu_devices=("0", "1", "2", "3")),
    NodeInfo("n1", "10.0.0.2", gpus=4, cpus=8, memory=1 << 35, gpu_devices=("4", "5", "6", "7")),
]


class Pool:
    """A store, a fake executor, a controller and the job service, wired as in `gpuyard up`."""

    def __init__(self, store: Store, executor: FakeExecutor, clock: ManualClock) -> None:
        self.store, self.executor, self.clock = store, executor, clock
        self.controller = Controller(store, executor, clock=clock, control_url="http://cp")
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        ensure_ops(store)

    def submit(self, **spec: object) -> int:
        spec.setdefault("command", "python train.py")
        return self.jobs.submit(JobSpec.model_validate(spec), owner="alice").id

    def state(self, job_id: int) -> JobState:
        return self.jobs.get(job_id, actor=OPS).state

    def transitions(self, job_id: int) -> list[tuple[str | None, str | None]]:
        return [
            (e.from_state, e.to_state)
            for e in self.jobs.events(job_id, actor=OPS)
            if e.kind in ("transition", "submitted")
        ]

    def reasons(self, job_id: int, kind: str) -> list[str]:
        return [e.reason for e in self.jobs.events(job_id, actor=OPS) if e.kind == kind]


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, FakeExecutor(TWO_NODES), clock)


def test_a_job_runs_to_success(pool: Pool) -> None:
    job_id = pool.submit(resources={"gpus": 2}, env={"A": "1"})
    pool.controller.tick()
    assert pool.state(job_id) is JobState.RUNNING
    [launch] = pool.executor.launches
    assert launch.env["A"] == "1"
    assert launch.env["GPUYARD_URL"] == "http://cp"
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert launch.argv == ["python", "train.py"]
    pool.executor.exit(job_id, code=0)
    pool.controller.tick()
    job = pool.jobs.get(job_id, actor=OPS)
    assert (job.state, job.exit_code, job.workers[0].state) == (JobState.SUCCEEDED, 0, "exited")
    assert pool.transitions(job_id) == [
        (None, "queued"),
        ("queued", "starting"),
        ("starting", "running"),
        ("running", "succeeded"),
    ]
    assert pool.reasons(job_id, "worker_exited") == ["worker 0 on n0 exited with code 0"]


def test_a_failed_worker_takes_the_gang_down(pool: Pool) -> None:
    job_id = pool.submit(nodes=2, resources={"gpus": 4}, graceful_shutdown=7)
    pool.controller.tick()
    assert {w.node for w in pool.jobs.get(job_id, actor=OPS).workers} == {"n0", "n1"}
    pool.executor.exit(job_id, rank=1, code=3)
    pool.controller.tick()
    survivor = pool.executor.workers[WorkerKey(job_id, 0, 0)]
    assert survivor.terminated_with_grace == 7  # told to exit with the job's graceful period
    pool.controller.tick()
    job = pool.jobs.get(job_id, actor=OPS)
    assert (job.state, job.exit_code) == (JobState.FAILED, 3)
    assert job.reason == "worker 1 on n1 exited with code 3"
    assert pool.transitions(job_id)[-2:] == [("running", "failing"), ("failing", "failed")]


def test_max_runtime_expires_the_job(pool: Pool) -> None:
    job_id = pool.submit(max_runtime="2s")
    pool.controller.tick()
    pool.clock.advance(1.9)
    pool.controller.tick()
    assert pool.state(job_id) is JobState.RUNNING
    pool.clock.advance(0.2)
    pool.controller.tick()
    pool.controller.tick()
    job = pool.jobs.get(job_id, actor=OPS)
    assert job.state is JobState.EXPIRED
    assert job.reason == "ran longer than its max runtime (2s)"
    assert pool.transitions(job_id)[-2:] == [("running", "expiring"), ("expiring", "expired")]
    assert "SIGTERM sent to worker 0" in pool.reasons(job_id, "signal")[0]


def test_stop_waits_for_the_graceful_period_then_kills(store: Store, clock: ManualClock) -> None:
    pool = Pool(store, FakeExecutor(TWO_NODES, exit_on_terminate=False), clock)
    job_id = pool.submit(graceful_shutdown=5)
    pool.controller.tick()
    pool.jobs.stop(job_id, actor=OPS)
    pool.controller.tick()
    worker = pool.executor.workers[WorkerKey(job_id, 0, 0)]
    assert worker.terminated_with_grace == 5
    pool.clock.advance(5 + 9)
    pool.controller.tick()
    assert not worker.killed and pool.state(job_id) is JobState.STOPPING  # supervisor's turn
    pool.clock.advance(2)  # past grace + the controller's backstop
    pool.controller.tick()
    assert worker.killed
    pool.controller.tick()
    job = pool.jobs.get(job_id, actor=OPS)
    assert (job.state, job.reason) == (JobState.STOPPED, "stopped by ops")
    signals = pool.reasons(job_id, "signal")
    assert "SIGTERM" in signals[0] and "SIGKILL" in signals[1]


def test_a_launch_failure_fails_the_job_and_stops_the_rest(
    store: Store, clock: ManualClock
) -> None:
    executor = FakeExecutor(
        TWO_NODES, fail_launch=lambda launch: "disk full" if launch.key.rank == 1 else None
    )
    pool = Pool(store, executor, clock)
    job_id = pool.submit(nodes=2)
    pool.controller.tick()  # launch: rank 1 fails -> failing
    pool.controller.tick()  # rank 0 is told to exit
    assert pool.state(job_id) is JobState.FAILING
    pool.controller.tick()  # rank 0's exit is seen -> failed
    job = pool.jobs.get(job_id, actor=OPS)
    assert (job.state, job.reason) == (JobState.FAILED, "disk full")
    assert executor.workers[WorkerKey(job_id, 0, 0)].terminated_with_grace is not None


def test_stop_before_launch_cancels_pending_workers(pool: Pool) -> None:
    job_id = pool.submit()
    with pool.store.write() as session:  # as if the controller crashed right after placing it
        row = session.get(JobRow, job_id)
        assert row is not None
        row.state, row.version = JobState.STARTING.value, row.version + 1
        row.placement = [{"node": "n0", "address": "10.0.0.1", "gpus": [], "cpus": 1}]
        session.add(WorkerRow(job_id=job_id, attempt=0, rank=0, node="n0", state="pending"))
    pool.jobs.stop(job_id, actor="alice")
    pool.controller.tick()
    assert pool.state(job_id) is JobState.STOPPED
    assert pool.executor.launches == []


def test_a_worker_whose_launch_failed_is_never_launched_again(pool: Pool) -> None:
    job_id = pool.submit()
    with pool.store.write() as session:  # its launch failed; the job's move was dropped (stale)
        row = session.get(JobRow, job_id)
        assert row is not None
        row.state, row.version = JobState.STARTING.value, row.version + 1
        row.placement = [{"node": "n0", "address": "10.0.0.1", "gpus": [], "cpus": 1}]
        session.add(
            WorkerRow(job_id=job_id, attempt=0, rank=0, node="n0", state="lost", detail="no")
        )
    pool.controller.tick()
    assert pool.executor.launches == []
    with pool.store.read() as session:
        worker = session.scalars(select(WorkerRow).where(WorkerRow.job_id == job_id)).one()
        assert (worker.state, worker.handle) == ("lost", None)
        job = session.get(JobRow, job_id)
        assert job is not None  # it fails with its worker's reason, never stays starting
        assert job.state != JobState.STARTING.value and job.reason == "no"


def test_a_new_controller_adopts_running_workers_without_relaunching(pool: Pool) -> None:
    job_id = pool.submit()
    pool.controller.tick()
    successor = Controller(pool.store, pool.executor, clock=pool.clock)
    successor.register_nodes()
    successor.tick()
    assert len(pool.executor.launches) == 1
    pool.executor.exit(job_id, code=0)
    successor.tick()
    assert pool.state(job_id) is JobState.SUCCEEDED


def test_a_crash_between_placing_and_recording_the_launch_never_duplicates(pool: Pool) -> None:
    job_id = pool.submit()
    pool.controller.tick()
    with pool.store.write() as session:  # the handle was never recorded
        worker = session.scalars(select(WorkerRow).where(WorkerRow.job_id == job_id)).one()
        worker.handle, worker.state = None, "pending"
        row = session.get(JobRow, job_id)
        assert row is not None
        row.state = JobState.STARTING.value
    successor = Controller(pool.store, pool.executor, clock=pool.clock)
    successor.tick()
    assert pool.state(job_id) is JobState.RUNNING
    assert len(pool.executor.launches) == 1


def test_a_stale_decision_is_dropped(pool: Pool) -> None:
    job_id = pool.submit()
    pool.jobs.stop(job_id, actor="alice")  # version moves from 0 to 1
    nodes = {"n0": NodeFacts("10.0.0.1", "host")}
    started = pool.controller.applier.start_all(
        [Start(job_id, 0, (Allocation("n0"),))], nodes, {}, 0.0
    )
    assert started == []
    assert pool.state(job_id) is JobState.STOPPED
    assert pool.executor.launches == []


def test_waiting_jobs_show_why(pool: Pool) -> None:
    big = pool.submit(nodes=2, resources={"gpus": 4})
    small = pool.submit(resources={"gpus": 1})
    waiting = pool.submit(nodes=2)
    pool.controller.tick()
    assert pool.state(big) is JobState.RUNNING
    assert pool.state(small) is JobState.QUEUED
    shown = pool.jobs.get(small, actor=OPS)
    assert shown.reason == "waiting for a node with 1 free GPU and 1 free CPU"
    assert shown.wait_code == "resources"
    # The small job reserved the first node to free; the gang waits behind it.
    assert pool.jobs.get(waiting, actor=OPS).reason == (
        f"waiting for 2 whole free nodes; behind job {small}, which goes first"
    )
    pool.executor.exit(big, 0, 0)
    pool.executor.exit(big, 1, 0)
    pool.controller.tick()
    assert pool.state(small) is JobState.RUNNING
    assert pool.jobs.get(small, actor=OPS).reason is None
    assert pool.jobs.get(small, actor=OPS).wait_code is None


def test_nodes_that_vanish_are_marked_gone(store: Store, clock: ManualClock) -> None:
    Pool(store, FakeExecutor(TWO_NODES), clock)
    Pool(store, FakeExecutor(TWO_NODES[:1]), clock)
    pool = Pool(store, FakeExecutor(TWO_NODES[:1]), clock)
    from gpuyard.services.nodes import NodeService

    assert [(n.name, n.state.value) for n in NodeService(pool.store).list_nodes(actor=None)] == [
        ("n0", "ready"),
        ("n1", "gone"),
    ]


def test_a_failed_jobs_event_names_the_root_cause_across_ranks(
    store: Store, clock: ManualClock
) -> None:
    """Rank 1 hits an illegal memory access; rank 0 times out in a collective and exits first.
    The diagnosis names rank 1's fault (a root), not rank 0's timeout (a cascade)."""
    pool = Pool(store, FakeExecutor(TWO_NODES, exit_on_terminate=True), clock)
    job_id = pool.submit(mode="pytorch", nodes=2)
    pool.controller.tick()
    pool.executor.write_log(
        job_id,
        b"step 10 loss 0.41\nRuntimeError: [../third_party/gloo/gloo/transport/tcp/"
        b"unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete\n",
        rank=0,
    )
    pool.executor.write_log(
        job_id,
        b'step 10 loss 0.40\nTraceback (most recent call last):\n  File "t.py", line 9\n'
        b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
        b"CUDA kernel errors might be asynchronously reported at some other API call\n",
        rank=1,
    )
    pool.executor.exit(job_id, rank=0, code=1)  # the cascade ends first
    pool.controller.tick()
    clock.advance(1)
    pool.executor.exit(job_id, rank=1, code=1)
    pool.controller.tick()
    pool.controller.tick()
    assert pool.state(job_id) is JobState.FAILED
    [why] = pool.reasons(job_id, "diagnosis")
    assert why.startswith("rank 1 on n1: CUDA fatal error (RuntimeError: CUDA error: an illegal")
    assert why.endswith("[suspect: node]")


def test_a_failure_without_a_known_signature_adds_no_diagnosis(
    store: Store, clock: ManualClock
) -> None:
    pool = Pool(store, FakeExecutor(TWO_NODES), clock)
    job_id = pool.submit()
    pool.controller.tick()
    pool.executor.write_log(job_id, b"step 1\nbye\n")
    pool.executor.exit(job_id, code=3)
    pool.controller.tick()
    assert pool.state(job_id) is JobState.FAILED
    assert pool.reasons(job_id, "diagnosis") == []


def test_excluded_nodes_are_never_used(pool: Pool) -> None:
    job_id = pool.submit(resources={"gpus": 1}, exclude_nodes=["n0"])
    pool.controller.tick()
    assert pool.state(job_id) is JobState.RUNNING
    assert [launch.node for launch in pool.executor.launches] == ["n1"]
    with pytest.raises(InvalidSpec, match=r"only 1 node\(s\) \(not on n1\) can hold"):
        pool.submit(nodes=2, resources={"gpus": 1}, exclude_nodes=["n1"])
    with pytest.raises(InvalidSpec, match="exclude_nodes: there is no node n9"):
        pool.submit(exclude_nodes=["n9"])
    with pytest.raises(ValueError, match="has nothing to exclude"):
        pool.submit(node_names=["n0"], exclude_nodes=["n1"])
