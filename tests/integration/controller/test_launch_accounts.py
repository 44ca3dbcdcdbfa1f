"""The controller names each launch's OS account from the job's owner (docs/security.md)."""

from __future__ import annotations

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller, LaunchConfig
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.worker import NodeInfo, RunAs
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, UserRow


def make_pool(
    store: Store, clock: ManualClock, run_as: RunAs
) -> tuple[Controller, JobService, FakeExecutor]:
    executor = FakeExecutor([NodeInfo(f"n{i}", f"10.0.0.{i}", 0, 8, 1 << 34) for i in (1, 2)])
    controller = Controller(
        store,
        executor,
        clock=clock,
        control_url="http://cp",
        launch_config=LaunchConfig(run_as=run_as),
    )
    controller.register_nodes()
    return controller, JobService(store, clock=clock, notify=controller.notify), executor


def add_user(store: Store, clock: ManualClock, name: str, os_user: str | None) -> None:
    with store.write() as session:
        session.add(UserRow(name=name, created_at=clock.now(), os_user=os_user))


def job_row(store: Store, job_id: int) -> JobRow:
    with store.read() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        return row


def submit(jobs: JobService, owner: str, nodes: int = 1) -> int:
    spec = JobSpec.model_validate({"command": "python train.py", "nodes": nodes})
    return jobs.submit(spec, owner=owner).id


@pytest.mark.parametrize(
    ("owner", "os_user", "account"),
    [
        ("alice", None, "gpy-alice"),  # no row in the users table at all
        ("bob", None, "gpy-bob"),  # a row, no mapping
        ("carol", "research", "research"),  # an admin's mapping
        ("Dave.S", None, None),  # a name that had to change: gpy-dave_s-<hash>
    ],
)
def test_each_worker_runs_as_its_owners_account(
    store: Store, clock: ManualClock, owner: str, os_user: str | None, account: str | None
) -> None:
    controller, jobs, executor = make_pool(store, clock, RunAs.OWNER)
    if owner != "alice":
        add_user(store, clock, owner, os_user)
    job_id = submit(jobs, owner, nodes=2)
    controller.tick()
    assert job_row(store, job_id).state is JobState.RUNNING
    accounts = {launch.run_as for launch in executor.launches}
    if account is None:
        [made] = accounts
        assert made is not None and made.startswith("gpy-dave_s-")
    else:
        assert accounts == {account}


def test_a_pool_that_runs_jobs_as_itself_names_no_account(store: Store, clock: ManualClock) -> None:
    controller, jobs, executor = make_pool(store, clock, RunAs.POOL)
    add_user(store, clock, "carol", "research")
    submit(jobs, "carol")
    controller.tick()
    assert [launch.run_as for launch in executor.launches] == [None]


def test_a_mapping_to_root_fails_the_job_with_a_readable_reason(
    store: Store, clock: ManualClock
) -> None:
    controller, jobs, executor = make_pool(store, clock, RunAs.OWNER)
    add_user(store, clock, "mallory", "root")
    job_id = submit(jobs, "mallory")
    controller.tick()
    controller.tick()
    job = job_row(store, job_id)
    assert executor.launches == []  # nothing started, not even as the pool
    assert job.state in (JobState.FAILING, JobState.FAILED)
    assert job.reason is not None
    assert "mapped to the OS account 'root', and jobs never run as root" in job.reason
    assert "\n" not in job.reason and "Traceback" not in job.reason
