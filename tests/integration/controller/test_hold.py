"""Held jobs and `gpuyard exec` through the real loop, against the fake executor, with a manual
clock, on both databases: keep_failed, stop / run / kill / start, the held checker, the end of
a hold, and what each refusal says."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict, NotFound
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import ExecRun, FaultEntry, JobSpec, JobState, NodeState
from gpuyard.models.worker import NodeInfo, WorkerKey
from gpuyard.services.job_exec import ExecService
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeRow
from gpuyard.testing.auth import OPS, ensure_ops

NODES = [
    NodeInfo("n0", "10.0.0.1", gpus=2, cpus=8, memory=1 << 35, gpu_devices=("0", "1")),
    NodeInfo("n1", "10.0.0.2", gpus=2, cpus=8, memory=1 << 35, gpu_devices=("2", "3")),
]
EXEC = 200_000


class Pool:
    def __init__(self, store: Store, executor: FakeExecutor, clock: ManualClock) -> None:
        self.store, self.executor, self.clock = store, executor, clock
        self.controller = Controller(store, executor, clock=clock, control_url="http://cp")
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        self.execs = ExecService(
            store, clock=clock, policy=self.jobs.policy, notify=self.controller.notify
        )
        ensure_ops(store)

    def submit(self, **spec: object) -> int:
        spec.setdefault("command", "python train.py")
        spec.setdefault("nodes", 2)
        spec.setdefault("resources", {"gpus": 2})
        return self.jobs.submit(JobSpec.model_validate(spec), owner="alice").id

    def state(self, job_id: int) -> JobState:
        return self.jobs.get(job_id, actor=OPS).state

    def faults(self, job_id: int) -> list[FaultEntry]:
        return self.jobs.faults(job_id, actor=OPS)

    def transitions(self, job_id: int) -> list[tuple[str | None, str | None]]:
        return [
            (e.from_state, e.to_state)
            for e in self.jobs.events(job_id, actor=OPS)
            if e.kind == "transition"
        ]


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, FakeExecutor(NODES), clock)


def test_a_job_that_fails_for_good_is_held_with_its_nodes_and_fails_at_its_limit(
    pool: Pool,
) -> None:
    job_id = pool.submit(fault_tolerance={"max_restarts": 0, "keep_failed": "10m"})
    pool.controller.tick()
    assert pool.state(job_id) is JobState.RUNNING
    pool.executor.exit(job_id, rank=1, code=3)
    pool.controller.tick()  # the failure: rank 0 is told to exit (the fake exits at once)
    pool.controller.tick()
    job = pool.jobs.get(job_id, actor=OPS)
    assert job.state is JobState.HELD
    assert job.status.value == "running"
    assert job.exit_code == 3
    assert job.held_until is not None
    assert job.held_until.timestamp() == pytest.approx(pool.clock.now() + 600, abs=5)
    assert "worker 1 on n1 exited with code 3" in (job.reason or "")
    assert "kept for debugging for at most 10m" in (job.reason or "")
    assert pool.executor.workers[WorkerKey(job_id, 0, 0)].terminated_with_grace is not None
    [fault] = pool.faults(job_id)
    assert "held for debugging first, for 10m" in fault.action

    # Its nodes stay its own: a job that needs them waits.
    other = pool.submit(command="python other.py")
    pool.controller.tick()
    assert pool.state(other) is JobState.QUEUED

    pool.clock.advance(601)
    pool.controller.tick()
    pool.controller.tick()
    job = pool.jobs.get(job_id, actor=OPS)
    assert job.state is JobState.FAILED
    assert job.exit_code == 3
    assert (job.reason or "").endswith("its hold ended at its time limit")
    assert pool.transitions(job_id) == [
        ("queued", "starting"),
        ("starting", "running"),
        ("running", "halting"),
        ("halting", "held"),
        ("held", "failing"),
        ("failing", "failed"),
    ]
    pool.controller.tick()
    assert pool.state(other) in (JobState.STARTING, JobState.RUNNING)


def test_stop_run_kill_start_and_the_job_completes(pool: Pool) -> None:
    job_id = pool.submit(env={"MY_VAR": "x"}, graceful_shutdown=5)
    pool.controller.tick()
    stopped = pool.execs.stop(job_id, actor="alice")
    assert stopped.state is JobState.HALTING
    assert "told to exit" in stopped.outcome
    pool.controller.tick()  # SIGTERM (the fake's workers exit at once)
    pool.controller.tick()  # their exits: held
    assert pool.state(job_id) is JobState.HELD
    assert pool.executor.workers[WorkerKey(job_id, 0, 1)].terminated_with_grace == 5

    ran = pool.execs.run(job_id, ExecRun(command=["hostname", "-f"]), actor="alice")
    assert ran.ranks == [EXEC, EXEC + 1]
    pool.controller.tick()
    launches = {
        launch.key.rank: launch
        for launch in pool.executor.launches
        if launch.key.job_id == job_id and launch.key.rank >= EXEC
    }
    assert sorted(launches) == [EXEC, EXEC + 1]
    first = launches[EXEC]
    assert first.argv == ["hostname", "-f"]
    assert (first.node, launches[EXEC + 1].node) == ("n0", "n1")
    assert first.role == "exec" and not first.primary
    assert first.env["MY_VAR"] == "x"
    assert first.env["GPUYARD_JOB_ID"] == str(job_id)
    assert first.env["GPUYARD_NODE_RANK"] == "0"
    assert launches[EXEC + 1].env["GPUYARD_NODE_RANK"] == "1"
    assert launches[EXEC + 1].env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert first.env["GPUYARD_EXEC_RANK"] == str(EXEC)
    assert first.cwd.endswith(f"attempts/0/worker-{EXEC}/workspace")
    assert first.limits.gpus == 2

    status = pool.execs.status(job_id, actor="alice")
    assert [(w.rank, w.role, w.state) for w in status.workers] == [
        (0, "worker", "exited"),
        (1, "worker", "exited"),
        (EXEC, "exec", "running"),
        (EXEC + 1, "exec", "running"),
    ]
    assert status.workers[2].command == ["hostname", "-f"]

    # One run at a time; the job cannot start while it runs.
    with pytest.raises(Conflict, match="an earlier run still runs"):
        pool.execs.run(job_id, ExecRun(command=["true"]), actor="alice")
    with pytest.raises(Conflict, match="still run"):
        pool.execs.start(job_id, actor="alice")

    pool.executor.exit(job_id, rank=EXEC, code=0)
    killed = pool.execs.kill(job_id, [EXEC + 1, 0], actor="alice")
    assert killed.ranks == [EXEC + 1]
    assert "worker(s) 0 had already ended" in killed.outcome
    pool.controller.tick()
    assert pool.executor.workers[WorkerKey(job_id, 0, EXEC + 1)].killed
    pool.controller.tick()
    usercalls = [f for f in pool.faults(job_id) if f.kind == "usercall"]
    assert [f.cause for f in usercalls] == [
        "exec stop",
        "exec run hostname -f",
        "exec kill 200001 0",
    ]
    assert {f.actor for f in usercalls} == {"user:alice"}
    run_entry = usercalls[1]
    assert run_entry.rank == EXEC
    assert run_entry.outcome is not None
    assert "worker 200000 on n0 exited with code 0" in run_entry.outcome
    assert "worker 200001 on n1" in run_entry.outcome

    # The next run takes the next ranks.
    again = pool.execs.run(job_id, ExecRun(command=["date"]), actor="alice")
    assert again.ranks == [EXEC + 2, EXEC + 3]
    pool.controller.tick()
    pool.executor.exit(job_id, rank=EXEC + 2)
    pool.executor.exit(job_id, rank=EXEC + 3)
    pool.controller.tick()

    started = pool.execs.start(job_id, actor="alice")
    assert started.state is JobState.RESTARTING
    pool.controller.tick()
    pool.controller.tick()
    job = pool.jobs.get(job_id, actor=OPS)
    assert (job.state, job.attempt) == (JobState.RUNNING, 1)
    assert job.held_until is None
    assert pool.transitions(job_id)[-3:] == [
        ("held", "restarting"),
        ("restarting", "starting"),
        ("starting", "running"),
    ]
    start_entry = next(f for f in pool.faults(job_id) if f.cause == "exec start")
    assert start_entry.outcome is not None and "running again" in start_entry.outcome
    pool.executor.exit(job_id, rank=0, attempt=1)
    pool.executor.exit(job_id, rank=1, attempt=1)
    pool.controller.tick()
    job = pool.jobs.get(job_id, actor=OPS)
    assert job.state is JobState.SUCCEEDED
    with pool.store.read() as session:
        from gpuyard.store.tables import JobRow

        row = session.get(JobRow, job_id)
        assert row is not None and row.restarts == 0  # a person's start is not a fault's


def test_the_held_checker_reports_and_cordons_a_node_it_blames(pool: Pool) -> None:
    job_id = pool.submit()
    pool.controller.tick()
    pool.execs.stop(job_id, actor="alice", hold=3600)
    pool.controller.tick()
    pool.controller.tick()
    ran = pool.execs.run(job_id, ExecRun(target="checker"), actor="alice")
    assert ran.ranks == [EXEC, EXEC + 1]
    pool.controller.tick()
    checks = [launch for launch in pool.executor.launches if launch.key.rank >= EXEC]
    assert [c.role for c in checks] == ["check", "check"]
    assert "--rank" in checks[1].argv and checks[1].argv[checks[1].argv.index("--rank") + 1] == "1"
    pool.executor.exit(job_id, rank=EXEC)
    pool.executor.exit(job_id, rank=EXEC + 1)
    pool.controller.tick()
    entry = next(f for f in pool.faults(job_id) if f.cause == "exec run -t checker")
    assert entry.outcome == "the node check passed on n0, n1"

    pool.execs.run(job_id, ExecRun(target="checker"), actor="alice")
    pool.controller.tick()
    pool.executor.write_log(
        job_id,
        b"gpuyard-check: FAILED node=n1 test=burn products differ from the first\n",
        rank=EXEC + 3,
    )
    pool.executor.exit(job_id, rank=EXEC + 2)
    pool.executor.exit(job_id, rank=EXEC + 3, code=1)
    pool.controller.tick()
    entry = [f for f in pool.faults(job_id) if f.cause == "exec run -t checker"][1]
    assert entry.outcome is not None
    assert entry.outcome.startswith("the node check failed: n1: burn: products differ")
    with pool.store.read() as session:
        node = session.get(NodeRow, "n1")
        assert node is not None and node.state is NodeState.CORDONED
        assert node.cordoned_by == f"check:job {job_id}"
    assert pool.state(job_id) is JobState.HELD

    # Started again, it is placed again without the node it blamed (none other fits: it waits).
    pool.execs.start(job_id, actor="alice")
    pool.controller.tick()
    pool.controller.tick()
    assert pool.state(job_id) is JobState.SUSPENDED


def test_a_hold_ends_at_its_limit_as_stopped_and_a_stop_ends_a_failed_hold_as_failed(
    pool: Pool,
) -> None:
    held = pool.submit(nodes=1)
    kept = pool.submit(nodes=1, fault_tolerance={"enabled": False, "keep_failed": 3600})
    pool.controller.tick()
    pool.execs.stop(held, actor="alice", hold=60)
    pool.executor.exit(kept, code=2)
    pool.controller.tick()
    pool.controller.tick()
    assert (pool.state(held), pool.state(kept)) == (JobState.HELD, JobState.HELD)
    pool.execs.run(held, ExecRun(command=["sleep", "1000"]), actor="alice")
    pool.controller.tick()

    pool.clock.advance(61)
    pool.controller.tick()  # the hold ends: the exec worker is drained with the job
    pool.controller.tick()
    job = pool.jobs.get(held, actor=OPS)
    assert job.state is JobState.STOPPED
    assert job.reason == (
        "held by alice (gpuyard exec stop) for at most 1m00s; its hold ended at its time limit"
    )
    assert pool.executor.workers[WorkerKey(held, 0, EXEC)].terminated_with_grace is not None

    pool.jobs.stop(kept, actor="alice")
    pool.controller.tick()
    job = pool.jobs.get(kept, actor=OPS)
    assert job.state is JobState.FAILED
    assert job.exit_code == 2
    assert (job.reason or "").startswith("worker 0 on n")
    assert (job.reason or "").endswith("alice ended its hold")


def test_refusals_say_why_and_change_nothing(pool: Pool) -> None:
    job_id = pool.submit(nodes=1)
    with pytest.raises(Conflict, match="is queued: none of its processes run"):
        pool.execs.stop(job_id, actor="alice")
    pool.controller.tick()
    with pytest.raises(Conflict, match=r"is not held, so you cannot run a command in it: it runs"):
        pool.execs.run(job_id, ExecRun(command=["hostname"]), actor="alice")
    with pytest.raises(Conflict, match="is not held"):
        pool.execs.kill(job_id, [0], actor="alice")
    with pytest.raises(Conflict, match="is not held"):
        pool.execs.start(job_id, actor="alice")
    pool.execs.stop(job_id, actor="alice")
    with pytest.raises(Conflict, match="its workers are still exiting"):
        pool.execs.run(job_id, ExecRun(command=["hostname"]), actor="alice")
    pool.controller.tick()
    pool.controller.tick()
    with pytest.raises(NotFound, match="has no worker 7 in its attempt 0"):
        pool.execs.kill(job_id, [0, 7], actor="alice")
    with pytest.raises(NotFound):
        pool.execs.status(job_id, actor="mallory")  # not hers: as if it did not exist
    assert [f.cause for f in pool.faults(job_id)] == ["exec stop"]
    with pool.store.read() as session:
        from gpuyard.store.tables import WorkerRow

        assert not session.scalars(select(WorkerRow).where(WorkerRow.rank >= EXEC)).all()
