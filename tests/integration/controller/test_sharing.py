"""Time-sharing through the real controller: notices, acknowledgements, deadlines, requeueing at
the original position, resuming as the next attempt; elastic growth, alternative specs, and
queue predictions that come true. Fake executor, manual clock, both databases."""

from __future__ import annotations

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict, NotFound
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState, JobStatus
from gpuyard.models.worker import NodeInfo, WorkerKey
from gpuyard.scheduler import Snapshot
from gpuyard.services.jobs import JobService
from gpuyard.services.scheduling import SchedulingService
from gpuyard.store.engine import Store
from gpuyard.store.snapshot import load_snapshot
from gpuyard.store.tables import PoolRow
from gpuyard.testing.auth import OPS, ensure_ops

TWO = [
    NodeInfo("n0", "10.0.0.1", gpus=4, cpus=8, memory=1 << 35, gpu_devices=("0", "1", "2", "3")),
    NodeInfo("n1", "10.0.0.2", gpus=4, cpus=8, memory=1 << 35, gpu_devices=("4", "5", "6", "7")),
]


class Pool:
    def __init__(
        self,
        store: Store,
        clock: ManualClock,
        *,
        preemption: str = "suspend",
        policy: dict[str, object] | None = None,
        predict_run_times: bool = True,
        **fake: object,
    ) -> None:
        self.store, self.clock = store, clock
        with store.write() as session:
            session.add(
                PoolRow(
                    name="default",
                    preemption=preemption,
                    notice=60.0,
                    grow_after=30,
                    **(policy or {}),
                )
            )
        self.executor = FakeExecutor(TWO, **fake)  # type: ignore[arg-type]
        self.controller = Controller(
            store, self.executor, clock=clock, predict_run_times=predict_run_times
        )
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        ensure_ops(store)
        self.scheduling = SchedulingService(store, clock=clock)

    def submit(self, owner: str = "alice", **spec: object) -> int:
        spec.setdefault("command", "python train.py")
        return self.jobs.submit(JobSpec.model_validate(spec), owner=owner).id

    def state(self, job_id: int) -> JobState:
        return self.jobs.get(job_id, actor=OPS).state

    def events(self, job_id: int, kind: str) -> list[str]:
        return [e.reason for e in self.jobs.events(job_id, actor=OPS) if e.kind == kind]

    def worker(self, job_id: int, rank: int = 0, attempt: int = 0):  # type: ignore[no-untyped-def]
        return self.executor.workers[WorkerKey(job_id, attempt, rank)]

    def suspend_by_hand(self, job_id: int, attempt: int = 0) -> None:
        """Suspend a running job of one worker, which checkpoints and exits at once."""
        self.scheduling.suspend(job_id, actor=OPS)
        self.controller.tick()
        self.executor.exit(job_id, code=75, attempt=attempt)
        self.controller.tick()

    def snapshot(self) -> Snapshot:
        with self.store.read() as session:
            return load_snapshot(session, self.clock.now())


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, clock)


def test_a_higher_tier_suspends_a_lower_job_which_resumes_later(pool: Pool) -> None:
    low = pool.submit(priority="low", nodes=2, resources={"gpus": 4})
    pool.controller.tick()
    assert pool.state(low) is JobState.RUNNING
    pool.clock.advance(100)
    high = pool.submit(priority="high", resources={"gpus": 4}, max_runtime=600)
    pool.controller.tick()
    assert pool.state(low) is JobState.SUSPENDING
    waiting = pool.jobs.get(high, actor=OPS)
    assert (waiting.state, waiting.wait_code) == (JobState.QUEUED, "preempting")
    assert f"job {low}" in (waiting.reason or "")
    pool.controller.tick()  # the notice goes out
    [notice] = pool.worker(low).notices
    assert notice.deadline == pool.clock.now() + 60
    assert "make room for job" in notice.reason
    assert len(pool.worker(low, 1).notices) == 1
    # The script acknowledges, checkpoints and exits with the suspended code.
    now = pool.clock.now()
    for rank in (0, 1):
        pool.executor.report(low, rank, acknowledged_at=now, checkpoint_at=now, checkpoint_step=7)
    pool.controller.tick()
    assert len(pool.events(low, "acknowledged")) == 2
    assert pool.events(low, "checkpoint") == ["worker 0 saved a checkpoint at step 7"]
    for rank in (0, 1):
        pool.executor.exit(low, rank, code=75)
    pool.controller.tick()
    suspended = pool.jobs.get(low, actor=OPS)
    assert (suspended.state, suspended.status.value, suspended.attempt) == (
        JobState.SUSPENDED,
        "queued",
        1,
    )
    assert suspended.suspensions == 1
    pool.controller.tick()
    assert pool.state(high) is JobState.RUNNING
    # The high job ends; the low one resumes as attempt 1 with the same checkpoint dir.
    pool.executor.exit(high, code=0)
    pool.controller.tick()
    pool.controller.tick()
    resumed = pool.jobs.get(low, actor=OPS)
    assert (resumed.state, resumed.attempt) == (JobState.RUNNING, 1)
    launch = pool.worker(low, attempt=1).launch
    assert launch.env["GPUYARD_ATTEMPT"] == "1"
    assert launch.env["GPUYARD_CHECKPOINT_DIR"] == "/fake/jobs/1/checkpoints"
    transitions = [
        (e.from_state, e.to_state) for e in pool.jobs.events(low, actor=OPS) if e.to_state
    ]
    assert ("running", "suspending") in transitions
    assert ("suspending", "suspended") in transitions
    assert ("suspended", "starting") in transitions


def test_a_job_that_ignores_the_notice_is_killed_and_still_requeued_in_place(
    store: Store, clock: ManualClock
) -> None:
    pool = Pool(store, clock, exit_on_terminate=False)
    low = pool.submit(priority="low", resources={"gpus": 4}, graceful_shutdown=10)
    other = pool.submit(priority="low", resources={"gpus": 4}, graceful_shutdown=10)
    pool.controller.tick()
    later = pool.submit(priority="low", resources={"gpus": 4})  # queued after low
    high = pool.submit(priority="high", nodes=2, resources={"gpus": 4})
    pool.controller.tick()
    assert pool.state(low) is JobState.SUSPENDING and pool.state(other) is JobState.SUSPENDING
    pool.controller.tick()
    assert pool.jobs.get(high, actor=OPS).wait_code == "preempting"
    pool.clock.advance(59)
    pool.controller.tick()
    assert pool.worker(low).terminated_with_grace is None  # still within the notice
    pool.clock.advance(2)
    pool.controller.tick()
    assert pool.worker(low).terminated_with_grace == 10  # SIGTERM at the deadline
    pool.clock.advance(10 + 11)  # the graceful period and the controller's backstop
    pool.controller.tick()
    assert pool.worker(low).killed
    pool.controller.tick()
    job = pool.jobs.get(low, actor=OPS)
    assert job.state is JobState.SUSPENDED
    [why] = [e.reason for e in pool.jobs.events(low, actor=OPS) if e.to_state == "suspended"]
    assert "was SIGKILLed" in why and "is lost" in why
    assert any("SIGTERM" in r for r in pool.events(low, "signal"))
    # Once the high job is done, low goes before `later`: it kept its original position.
    pool.controller.tick()
    pool.executor.exit(high, 0, 0)
    pool.executor.exit(high, 1, 0)
    pool.controller.tick()
    pool.controller.tick()
    assert pool.state(low) is JobState.RUNNING and pool.state(other) is JobState.RUNNING
    assert pool.state(later) is JobState.QUEUED


def test_a_person_can_suspend_a_job_by_hand(pool: Pool) -> None:
    job = pool.submit(resources={"gpus": 1})
    pool.controller.tick()
    view = pool.scheduling.suspend(job, actor="alice")
    assert view.state is JobState.SUSPENDING
    with pytest.raises(NotFound, match=f"job {job} does not exist"):  # not hers to see
        pool.scheduling.suspend(job, actor="mallory")
    pool.controller.tick()
    pool.executor.exit(job, code=75)
    pool.controller.tick()
    # Requeued at its place, and with nobody else waiting it resumes at once, as attempt 1.
    view = pool.jobs.get(job, actor=OPS)
    assert (view.state, view.attempt, view.suspensions) == (JobState.RUNNING, 1, 1)
    [why] = [e.reason for e in pool.jobs.events(job, actor=OPS) if e.to_state == "suspending"]
    assert why.startswith("suspended by alice")


def test_a_job_suspended_with_a_hold_pauses_until_released(pool: Pool) -> None:
    job = pool.submit(resources={"gpus": 1})
    pool.controller.tick()
    with pytest.raises(Conflict, match="suspend --hold"):  # a plain hold needs a waiting job
        pool.jobs.hold(job, actor="alice")
    view = pool.scheduling.suspend(job, actor="alice", hold=True)
    assert (view.state, view.on_hold) == (JobState.SUSPENDING, True)
    pool.controller.tick()
    pool.executor.exit(job, code=75)
    for _ in range(3):  # room for it on every pass, and still it is not placed again
        pool.controller.tick()
    view = pool.jobs.get(job, actor=OPS)
    assert (view.state, view.on_hold, view.attempt) == (JobState.SUSPENDED, True, 0 + 1)
    assert pool.events(job, "hold") == ["held by alice"]
    pool.jobs.hold(job, actor="alice", held=False)  # gpuyard resume
    pool.controller.tick()
    view = pool.jobs.get(job, actor=OPS)
    assert (view.state, view.on_hold, view.attempt) == (JobState.RUNNING, False, 1)


def test_a_suspending_job_can_be_held_and_released_before_it_is_suspended(pool: Pool) -> None:
    job = pool.submit(resources={"gpus": 1})
    pool.controller.tick()
    pool.scheduling.suspend(job, actor="alice")
    assert pool.scheduling.suspend(job, actor="alice", hold=True).on_hold  # held on its way
    pool.jobs.hold(job, actor="alice", held=False)
    pool.controller.tick()
    pool.executor.exit(job, code=75)
    pool.controller.tick()
    assert pool.state(job) is JobState.RUNNING  # released: it resumed at once
    with pytest.raises(Conflict, match="only a running job can be suspended"):
        pool.scheduling.suspend(pool.submit(resources={"gpus": 1}, hold=True), actor="alice")


def test_a_worker_that_suspends_itself_requeues_the_job(pool: Pool) -> None:
    job = pool.submit(nodes=2, resources={"gpus": 1})
    pool.controller.tick()
    pool.executor.report(job, 0, suspended_at=pool.clock.now())
    pool.executor.exit(job, 0, code=1)  # torchrun turned the rank's 75 into its own 1
    pool.controller.tick()
    assert pool.state(job) is JobState.SUSPENDING
    assert len(pool.worker(job, 1).notices) == 1  # the other worker is told too
    pool.executor.exit(job, 1, code=75)
    pool.controller.tick()
    assert pool.jobs.get(job, actor=OPS).attempt == 1 and pool.state(job) is JobState.RUNNING
    # A clean suspension reads as one, whatever code torchrun turned the 75 into.
    assert pool.events(job, "worker_exited") == [
        "worker 0 on n0 was suspended: it checkpointed and exited to be requeued (its launcher "
        "exited with code 1 for the rank's 75)",
        "worker 1 on n1 was suspended: it checkpointed and exited to be requeued (exit code 75)",
    ]


def test_stopping_a_suspended_job_ends_it(pool: Pool) -> None:
    job = pool.submit(resources={"gpus": 1})
    pool.controller.tick()
    blocker = pool.submit(owner="bob", priority="high", nodes=2, resources={"gpus": 1})
    pool.scheduling.suspend(job, actor="alice")
    pool.controller.tick()
    pool.executor.exit(job, code=75)
    pool.controller.tick()  # suspended, and the waiting high job takes the nodes
    assert pool.state(job) is JobState.SUSPENDED and pool.state(blocker) is JobState.RUNNING
    pool.jobs.stop(job, actor="alice")
    assert pool.state(job) is JobState.STOPPED


def test_an_elastic_job_grows_into_freed_nodes(pool: Pool) -> None:
    blocker = pool.submit(resources={"gpus": 1})
    pool.controller.tick()
    elastic = pool.submit(nodes=2, min_nodes=1, resources={"gpus": 4})
    pool.controller.tick()
    assert len(pool.jobs.get(elastic, actor=OPS).placement) == 1
    launch = pool.worker(elastic).launch
    assert launch.env["WORLD_SIZE"] == "1"
    pool.executor.exit(blocker, code=0)
    pool.clock.advance(31)  # past the pool's grow_after
    pool.controller.tick()
    assert pool.state(elastic) is JobState.SUSPENDING
    assert "grown from 1 to 2 nodes" in (pool.jobs.get(elastic, actor=OPS).reason or "")
    pool.controller.tick()
    pool.executor.exit(elastic, code=75)
    pool.controller.tick()
    pool.controller.tick()
    grown = pool.jobs.get(elastic, actor=OPS)
    assert (grown.state, len(grown.placement), grown.attempt) == (JobState.RUNNING, 2, 1)
    assert pool.worker(elastic, 1, attempt=1).launch.env["WORLD_SIZE"] == "2"


def test_the_first_alternative_spec_that_fits_starts_and_the_others_are_dropped(
    pool: Pool,
) -> None:
    blocker = pool.submit(resources={"gpus": 2})
    pool.controller.tick()
    job = pool.submit(resources={"gpus": 4}, alternatives=[{"gpus": 8}, {"gpus": 2, "cpus": 2}])
    pool.controller.tick()
    view = pool.jobs.get(job, actor=OPS)
    assert view.state is JobState.RUNNING
    assert (view.spec.resources.gpus, view.spec.alternatives) == (4, [])
    assert view.placement[0].node != pool.jobs.get(blocker, actor=OPS).placement[0].node
    job2 = pool.submit(resources={"gpus": 4}, alternatives=[{"gpus": 2, "cpus": 2}])
    pool.controller.tick()
    view2 = pool.jobs.get(job2, actor=OPS)
    assert (view2.state, view2.spec.resources.gpus) == (JobState.RUNNING, 2)
    [placed] = [e.reason for e in pool.jobs.events(job2, actor=OPS) if e.to_state == "starting"]
    assert "alternative spec 1" in placed
    assert pool.worker(job2).launch.env["CUDA_VISIBLE_DEVICES"].count(",") == 1


def test_queue_predictions_come_true(store: Store, clock: ManualClock) -> None:
    """A scripted day: every job runs exactly its max runtime. What the prediction said when
    each job was queued is when it then started. Run times are not predicted: the first
    forecasts, made before any job ended, could not know the order that predictions learnt
    later would give (docs/scheduling.md#predicted-run-times)."""
    pool = Pool(store, clock, preemption="never", predict_run_times=False)
    script = [  # (submit at, nodes, gpus, max runtime)
        (0, 2, 4, 300),
        (10, 1, 4, 120),
        (20, 1, 2, 600),
        (30, 2, 4, 60),
        (40, 1, 1, 900),
        (50, 1, 2, 30),
    ]
    predicted: dict[int, float] = {}
    started: dict[int, float] = {}
    ends: dict[int, float] = {}
    t0 = clock.now()
    ids: list[int] = []
    for _ in range(2000):
        now = clock.now() - t0
        busy = False  # something happened in this second: look again in the next one
        while len(ids) < len(script) and script[len(ids)][0] <= now:
            _, nodes, gpus, runtime = script[len(ids)]
            job_id = pool.submit(nodes=nodes, resources={"gpus": gpus}, max_runtime=runtime)
            ids.append(job_id)
            forecast = pool.scheduling.prediction(job_id, actor=OPS)
            assert forecast.start_at is not None, forecast
            predicted[job_id] = forecast.start_at.timestamp()
            busy = True
        for job_id, end in list(ends.items()):
            if clock.now() >= end:
                for w in pool.jobs.get(job_id, actor=OPS).workers:
                    pool.executor.exit(job_id, w.rank, 0)
                del ends[job_id]
                busy = True
        pool.controller.tick()
        for job_id in ids:
            if job_id in started:
                continue
            view = pool.jobs.get(job_id, actor=OPS)
            if view.state is JobState.RUNNING:
                started[job_id] = clock.now()
                ends[job_id] = clock.now() + float(view.spec.max_runtime or 0)
                busy = True
        if len(started) == len(script) and not ends:
            break
        # Quiet seconds change nothing (every job runs exactly its max runtime), so skip to
        # the next submission or end; the second after anything happened is still ticked.
        upcoming = [t0 + script[len(ids)][0]] if len(ids) < len(script) else []
        upcoming += ends.values()
        clock.advance(1 if busy or not upcoming else max(1.0, min(upcoming) - clock.now()))
    assert set(started) == set(ids)
    for job_id in ids:
        # One-second ticks: a start is seen within the tick after it is due.
        assert abs(started[job_id] - predicted[job_id]) <= 2, (job_id, predicted, started)
    # Not a trivial script: jobs wait behind running ones, queued ones and reservations.
    assert len({round(predicted[j] - t0) for j in ids}) >= 4


def test_a_controller_restart_keeps_a_suspension_going(pool: Pool) -> None:
    job = pool.submit(resources={"gpus": 1})
    pool.controller.tick()
    pool.scheduling.suspend(job, actor="alice")
    pool.controller.tick()
    successor = Controller(pool.store, pool.executor, clock=pool.clock)
    successor.register_nodes()
    successor.tick()
    assert len(pool.worker(job).notices) == 1  # not sent twice
    pool.executor.exit(job, code=75)
    successor.tick()
    assert pool.jobs.get(job, actor=OPS).suspensions == 1


HOUR = 3600.0


@pytest.mark.parametrize("age_halflife", [3 * HOUR, None], ids=["aging", "no-aging"])
def test_a_long_suspended_job_that_waited_long_ages_ahead_of_a_fresh_one(
    store: Store, clock: ManualClock, age_halflife: float | None
) -> None:
    """Time-slicing by GPU-hours: a job that had 8 GPU-hours sits in the band above a fresh
    job, which without aging always goes first. Having waited 10 hours (over three
    half-lives), it counts less than one GPU-hour, is in the fresh job's band, and goes first
    by its submission. Waiting is read from the store: the snapshot's queued_since."""
    pool = Pool(
        store,
        clock,
        preemption="never",
        policy={"slices": [HOUR], "age_halflife": age_halflife},
    )
    t0 = clock.now()
    long = pool.submit(resources={"gpus": 4})
    other = pool.submit(owner="carol", resources={"gpus": 4})
    pool.controller.tick()
    clock.advance(2 * HOUR)
    refill = pool.submit(owner="carol", resources={"gpus": 4})  # takes its node meanwhile
    pool.suspend_by_hand(long)
    pool.controller.tick()
    assert (pool.state(long), pool.state(refill)) == (JobState.SUSPENDED, JobState.RUNNING)
    [pending] = pool.snapshot().pending
    # Submitted at t0, it ran 2 hours: it has waited in all for the rest of the time since.
    assert (pending.attained, pending.queued_since) == (4 * 2 * HOUR, t0 + 2 * HOUR)

    clock.advance(10 * HOUR)
    fresh = pool.submit(resources={"gpus": 4})  # the same owner: only the bands decide
    pool.controller.tick()
    pool.executor.exit(other, code=0)
    pool.controller.tick()
    pool.controller.tick()
    first, second = (long, fresh) if age_halflife else (fresh, long)
    assert pool.state(first) is JobState.RUNNING
    assert pool.jobs.get(second, actor=OPS).status is JobStatus.QUEUED
    if age_halflife:
        [resumed] = [j for j in pool.snapshot().running if j.id == long]
        # It waited 10 hours since its suspension, none before its first start.
        assert (resumed.queued, resumed.suspensions, resumed.attained) == (
            10 * HOUR,
            1,
            4 * 2 * HOUR,
        )


def test_the_quantum_doubles_with_each_suspension_of_a_live_job(
    store: Store, clock: ManualClock
) -> None:
    """With min_run 1h, a job suspended once may not be suspended by its own tier before it
    has run 2 hours in its new attempt; then a less served job of its tier takes its room."""
    pool = Pool(store, clock, policy={"slices": [HOUR], "min_run": HOUR})
    pool.submit(owner="bob", priority="high", resources={"gpus": 4})  # holds a node throughout
    job = pool.submit(resources={"gpus": 4})
    pool.controller.tick()
    clock.advance(2 * HOUR)
    pool.suspend_by_hand(job)  # nobody waits: it resumes at once, as attempt 1
    pool.controller.tick()
    assert (pool.state(job), pool.jobs.get(job, actor=OPS).attempt) == (JobState.RUNNING, 1)

    clock.advance(1.5 * HOUR)  # past one quantum, not two
    newcomer = pool.submit(owner="carol", resources={"gpus": 4})
    pool.controller.tick()
    assert (pool.state(job), pool.state(newcomer)) == (JobState.RUNNING, JobState.QUEUED)
    clock.advance(HOUR)
    pool.controller.tick()
    assert pool.state(job) is JobState.SUSPENDING
    assert f"make room for job {newcomer}" in (pool.jobs.get(job, actor=OPS).reason or "")
