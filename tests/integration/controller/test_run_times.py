"""Predicted run times in a live pool: learnt from the jobs that ended, put on the controller's
snapshots and the API's predictions (docs/scheduling.md#predicted-run-times). Fake executor,
manual clock, both databases."""

from __future__ import annotations

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.worker import NodeInfo
from gpuyard.services.jobs import JobService
from gpuyard.services.scheduling import SchedulingService
from gpuyard.store.durations import RunTimes
from gpuyard.store.engine import Store
from gpuyard.testing.auth import OPS, ensure_ops

TWO = [
    NodeInfo("n0", "10.0.0.1", gpus=4, cpus=8, memory=1 << 35, gpu_devices=("0", "1", "2", "3")),
    NodeInfo("n1", "10.0.0.2", gpus=4, cpus=8, memory=1 << 35, gpu_devices=("4", "5", "6", "7")),
]
RUN = 600.0
"""How long each of ada's resnet runs takes."""


class Pool:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.store, self.clock = store, clock
        self.executor = FakeExecutor(TWO)
        self.controller = Controller(store, self.executor, clock=clock)
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        ensure_ops(store)
        self.scheduling = SchedulingService(store, clock=clock, run_times=RunTimes())

    def submit(self, owner: str, name: str, gpus: int, **spec: object) -> int:
        spec = {"command": "python train.py", "name": name, "resources": {"gpus": gpus}, **spec}
        return self.jobs.submit(JobSpec.model_validate(spec), owner=owner).id

    def state(self, job_id: int) -> JobState:
        return self.jobs.get(job_id, actor=OPS).state

    def run_for(self, seconds: float, *job_ids: int) -> None:
        """Start the jobs, let them run ``seconds``, and end them (status 0)."""
        self.controller.tick()
        assert {self.state(j) for j in job_ids} == {JobState.RUNNING}
        self.clock.advance(seconds)
        for job_id in job_ids:
            self.executor.exit(job_id, code=0)
        self.controller.tick()
        assert {self.state(j) for j in job_ids} == {JobState.SUCCEEDED}


def ada_history(pool: Pool) -> None:
    """Ten runs of one experiment, two at a time, each its own node for ten minutes."""
    for i in range(0, 10, 2):
        pool.run_for(
            RUN,
            pool.submit("ada", f"resnet50-run{i}", 4),
            pool.submit("ada", f"resnet50-run{i + 1}", 4),
        )


def test_the_eleventh_run_gets_a_start_with_a_range(store: Store, clock: ManualClock) -> None:
    pool = Pool(store, clock)
    ada_history(pool)
    # Runs 10 and 11 take both nodes; run 12, without a max runtime, waits for them.
    running = [pool.submit("ada", f"resnet50-run{i}", 4) for i in (10, 11)]
    pool.controller.tick()
    assert {pool.state(j) for j in running} == {JobState.RUNNING}
    clock.advance(60)
    waiting = pool.submit("ada", "resnet50-run12", 4)
    pool.controller.tick()
    found = pool.scheduling.prediction(waiting, actor=OPS)
    assert found.start_at is not None and found.earliest is not None and found.latest is not None
    expected = clock.now() + RUN - 60  # when runs 10 and 11 should end
    assert abs(found.start_at.timestamp() - expected) <= 1
    assert found.earliest.timestamp() <= found.start_at.timestamp() <= found.latest.timestamp()
    assert found.earliest < found.latest
    assert found.reason.startswith("starts in ") and "–" in found.reason, found.reason
    assert found.run_time is not None
    assert found.run_time.startswith("predicted 10m00s (")
    assert found.run_time.endswith("from 10 earlier 4-GPU jobs of ada named resnet*-run*")
    # A dry run of the next one says the same.
    spec = JobSpec.model_validate(
        {"command": "python train.py", "name": "resnet50-run13", "resources": {"gpus": 4}}
    )
    dry = pool.scheduling.predict(spec, owner="ada")
    assert dry.run_time == found.run_time and dry.earliest is not None
    # The controller's own wait message says when, from the predicted ends.
    view = pool.jobs.get(waiting, actor=OPS)
    assert view.state is JobState.QUEUED and "expected to start in about 9m" in (view.reason or "")


def test_a_job_predicted_short_backfills_where_a_long_one_may_not(
    store: Store, clock: ManualClock
) -> None:
    pool = Pool(store, clock)
    ada_history(pool)
    # bob's sweeps run for two hours each.
    pool.run_for(7200, *(pool.submit("bob", f"sweep-{i}", 1) for i in range(3)))
    # carl holds n0 for an hour at most; dave's two-node job (a higher tier) waits for it
    # and holds n1 meanwhile.
    carl = pool.submit("carl", "eval", 4, max_runtime=3600)
    pool.controller.tick()
    assert pool.state(carl) is JobState.RUNNING
    dave = pool.submit("dave", "pretrain", 4, nodes=2, priority="high")
    pool.controller.tick()
    assert pool.state(dave) is JobState.QUEUED
    # Neither ada's nor bob's next job has a max runtime: ada's is predicted to end well
    # before dave's start (10 minutes, from her runs on another size) and runs now on n1;
    # bob's (two hours) would fit beside it but waits.
    bob = pool.submit("bob", "sweep-3", 1)
    ada = pool.submit("ada", "resnet50-run10", 2)
    pool.controller.tick()
    assert pool.state(ada) is JobState.RUNNING
    assert [w.node for w in pool.jobs.get(ada, actor=OPS).workers] == ["n1"]
    assert pool.state(bob) is JobState.QUEUED
    reason = pool.jobs.get(bob, actor=OPS).reason or ""
    assert "held for job" in reason, reason


def test_without_history_nothing_changes(store: Store, clock: ManualClock) -> None:
    """A new pool: no job ended, so no prediction; the queue is what it was without them."""
    pool = Pool(store, clock)
    first = pool.submit("ada", "a", 4, nodes=2)
    pool.controller.tick()
    second = pool.submit("bob", "b", 4)
    found = pool.scheduling.prediction(second, actor=OPS)
    assert found.start_at is None and found.earliest is None
    assert "with no max runtime" in found.reason
    assert pool.state(first) is JobState.RUNNING


def test_metrics_say_how_good_the_predictions_are(store: Store, clock: ManualClock) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpuyard.services.metrics import registry

    pool = Pool(store, clock)
    ada_history(pool)
    text = generate_latest(registry(store, dict, run_times=pool.scheduling.run_times))
    found = {
        s.name: s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }
    # The first three runs had nothing to be predicted from: seven were scored, all exact.
    assert found["gpuyard_run_time_predictions_total"] == 7
    assert found["gpuyard_run_time_prediction_error"] == 0.0
    assert found["gpuyard_run_time_prediction_coverage"] == 1.0
