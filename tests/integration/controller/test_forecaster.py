"""Queue predictions come from the controller's forecaster: stored per job with the version
they were made for, read by the API, and made on demand only for a job changed since."""

from __future__ import annotations

from sqlalchemy import select

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, Priority
from gpuyard.models.worker import NodeInfo
from gpuyard.services.accounts import AccountService
from gpuyard.services.jobs import JobService
from gpuyard.services.scheduling import SchedulingService
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow
from gpuyard.testing.auth import OPS, ensure_ops


def test_stored_forecasts_answer_and_a_changed_job_is_predicted_again(
    store: Store, clock: ManualClock
) -> None:
    controller = Controller(
        store,
        FakeExecutor([NodeInfo("n0", "10.0.0.1", gpus=4, cpus=8, memory=1 << 34)]),
        clock=clock,
    )
    controller.register_nodes()
    accounts = AccountService(store, clock=clock)
    accounts.ensure_admins(["root"])
    jobs = JobService(store, clock=clock, accounts=accounts)
    scheduling = SchedulingService(store, clock=clock)
    ensure_ops(store)
    spec = JobSpec.model_validate({"command": "x", "resources": {"gpus": 4}, "max_runtime": 600})
    ids = [j.id for j in jobs.submit_many([spec] * 4, owner="alice")]
    controller.tick()  # the first runs; three wait, 10 minutes apart
    on_demand = [scheduling.prediction(i, actor=OPS) for i in ids[1:]]

    assert controller.forecaster.run_once() == 3
    with store.read() as session:
        stored = dict(session.execute(select(JobRow.id, JobRow.prediction)).all())
    assert [stored[i]["version"] for i in ids[1:]] == [0, 0, 0]
    assert [scheduling.prediction(i, actor=OPS) for i in ids[1:]] == on_demand
    assert [p.start_at and p.start_at.timestamp() - clock.now() for p in on_demand] == [
        600.0,
        1200.0,
        1800.0,
    ]
    assert controller.forecaster.run_once() == 0  # nothing changed: nothing written

    jobs.change_priority(ids[3], Priority.HIGH, actor="root")  # now it goes first
    moved = scheduling.prediction(
        ids[3], actor=OPS
    )  # its stored forecast is for version 0: not used
    assert moved.start_at is not None
    assert moved.start_at.timestamp() - clock.now() == 600.0
    assert controller.forecaster.run_once() >= 1
    assert scheduling.prediction(ids[3], actor=OPS) == moved
