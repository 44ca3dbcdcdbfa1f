"""Restarts after faults in the reconcile loop, against the fake executor with a manual clock:
the node a re-check blames is cordoned and the job placed again on the others; a restarted job
is launched by the very next pass."""

from __future__ import annotations

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.launch.check import CHECK_RANK_BASE
from gpuyard.models import JobSpec, JobState, NodeState
from gpuyard.models.worker import NodeInfo
from gpuyard.services.jobs import JobService
from gpuyard.services.nodes import cordon_node, uncordon_node
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeRow
from gpuyard.testing.auth import OPS, ensure_ops

NODES = [NodeInfo(f"n{i}", f"10.0.0.{i + 1}", gpus=1, cpus=1, memory=1 << 34) for i in range(3)]


def test_a_node_that_fails_the_recheck_is_not_given_the_job_again(
    store: Store, clock: ManualClock
) -> None:
    executor = FakeExecutor(NODES)
    controller = Controller(store, executor, clock=clock, control_url="http://cp")
    controller.register_nodes()
    jobs = JobService(store, clock=clock, notify=controller.notify)
    ensure_ops(store)
    spec = {"command": "python train.py", "nodes": 2, "resources": {"gpus": 1}}
    with store.write() as session:
        cordon_node(session, "n2", reason="spare", by="test", now=clock.now())
    job_id = jobs.submit(JobSpec.model_validate(spec | {"fault_tolerance": {}}), owner="a").id
    controller.tick()
    with store.write() as session:
        uncordon_node(session, "n2")
    clock.advance(1.0)
    controller.tick()
    job = jobs.get(job_id, actor=OPS)
    assert job.state is JobState.RUNNING
    first = sorted({s.node for s in job.placement})
    bad = first[1]

    executor.exit(job_id, rank=1, code=137, signal="SIGKILL")  # a fault with no known cause
    for _ in range(3):  # recovering; drained; re-checked as the next attempt
        clock.advance(1.0)
        controller.tick()
    job = jobs.get(job_id, actor=OPS)
    assert job.state is JobState.STARTING
    checks = sorted(w.rank for w in job.workers if w.rank >= CHECK_RANK_BASE)
    assert len(checks) == 2
    executor.exit(job_id, rank=checks[0], attempt=job.attempt, code=0)
    line = f"gpuyard-check: FAILED node={bad} test=burn cpu: product 1 differs\n".encode()
    executor.write_log(job_id, line, rank=checks[1], attempt=job.attempt)
    executor.exit(job_id, rank=checks[1], attempt=job.attempt, code=86)
    clock.advance(1.0)
    controller.tick()
    clock.advance(1.0)
    controller.tick()

    job = jobs.get(job_id, actor=OPS)
    assert job.state is JobState.RUNNING
    assert bad not in {s.node for s in job.placement}
    [failure, check] = jobs.faults(job_id, actor=OPS)
    assert (failure.kind, check.kind, check.node) == ("failure", "check", bad)
    assert check.outcome is not None and check.outcome.startswith("running again on")
    with store.read() as session:
        node = session.get(NodeRow, bad)
        assert node is not None and node.state is NodeState.CORDONED


def test_a_job_restarted_after_a_fault_is_launched_by_the_next_pass(
    store: Store, clock: ManualClock
) -> None:
    executor = FakeExecutor(NODES)
    controller = Controller(store, executor, clock=clock, control_url="http://cp")
    controller.register_nodes()
    jobs = JobService(store, clock=clock, notify=controller.notify)
    ensure_ops(store)
    spec = {"command": "python train.py", "fault_tolerance": {"retry_job_errors": True}}
    job_id = jobs.submit(JobSpec.model_validate(spec), owner="a").id
    controller.tick()
    executor.write_log(job_id, b"step 5: loss is nan\n")
    executor.exit(job_id, code=1)  # an error of its own, restarted without a re-check
    controller.tick()
    assert jobs.get(job_id, actor=OPS).state is JobState.RECOVERING
    # Passes that only look at what changed (a full one comes every 2 s): each takes a step.
    controller.tick(full=False)
    controller.tick(full=False)
    job = jobs.get(job_id, actor=OPS)
    assert (job.state, job.attempt) == (JobState.RUNNING, 1)
