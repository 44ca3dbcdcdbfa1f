"""Data preparation as a phase of a job's start (docs/datasets.md, "Data preparation"),
against the fake executor's nodes: the events and reason it shows, the workers pointed at each
node's copy, a copy reused by the next job, a changed file failing the job by name, and a node
without room left out of the job's placement without being cordoned."""

from __future__ import annotations

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState, NodeState
from gpuyard.models.dataset import Manifest, ManifestFile
from gpuyard.models.worker import NodeInfo
from gpuyard.services.jobs import JobService
from gpuyard.services.nodes import NodeService
from gpuyard.store.engine import Store
from gpuyard.testing.auth import OPS, ensure_ops
from gpuyard.testing.datasets import ready_version

NODES = [
    NodeInfo("n0", "10.0.0.1", gpus=0, cpus=8, memory=1 << 35),
    NodeInfo("n1", "10.0.0.2", gpus=0, cpus=8, memory=1 << 35),
]
MANIFEST = Manifest(files=[ManifestFile(path="train/a.bin", size=3 << 30, sha256="ab" * 32)])


class Pool:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.store = store
        self.clock = clock
        self.executor = FakeExecutor(NODES)
        self.controller = Controller(store, self.executor, clock=clock, control_url="http://cp")
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        ensure_ops(store)
        self.version = ready_version(store, MANIFEST)

    def submit(self, nodes: int = 1, *, prepare: bool = True) -> int:
        mount = {
            "name": "data",
            "dataset": "alice/data@1",
            "dataset_version": self.version,
            "path": "/shared/data",
            "prepare": prepare,
        }
        spec = JobSpec.model_validate(
            {"command": "python train.py", "nodes": nodes, "mounts": {"datasets": [mount]}}
        )
        return self.jobs.submit(spec, owner="alice").id

    def state(self, job_id: int) -> JobState:
        return self.jobs.get(job_id, actor=OPS).state

    def reason(self, job_id: int) -> str:
        return self.jobs.get(job_id, actor=OPS).reason or ""

    def data_events(self, job_id: int) -> list[str]:
        return [e.reason for e in self.jobs.events(job_id, actor=OPS) if e.kind == "data"]

    def mounted(self, job_id: int) -> dict[str, str]:
        """Per node, where the job's workers find workspace/dataset/data."""
        return {
            launch.node: bind.source
            for launch in self.executor.launches
            if launch.key.job_id == job_id
            for bind in launch.binds
            if bind.target.endswith("/dataset/data") and bind.readonly
        }

    def tick(self, after: float = 0.0) -> None:
        self.clock.advance(after)
        self.controller.tick()


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, clock)


def test_each_node_copies_once_and_the_workers_mount_its_copy(pool: Pool) -> None:
    job = pool.submit(nodes=2)
    pool.tick()
    assert pool.state(job) is JobState.RUNNING, pool.reason(job)
    events = pool.data_events(job)
    assert events[0] == "preparing data: alice/data@1 (3Gi) on n0, n1"
    assert sorted(e.split(":")[0] for e in events[1:]) == [
        "prepared dataset alice/data@1 on n0",
        "prepared dataset alice/data@1 on n1",
    ]
    assert all("3Gi copied and verified in" in e for e in events[1:])
    assert pool.reason(job) == ""
    key = f"v{pool.version}-{MANIFEST.digest()[7:23]}"
    assert pool.mounted(job) == {n: f"/fake/data/{n}/{key}" for n in ("n0", "n1")}

    for rank in (0, 1):
        pool.executor.exit(job, rank, code=0)
    pool.tick(after=1)
    second = pool.submit(nodes=2)
    pool.tick(after=1)
    assert pool.state(second) is JobState.RUNNING, pool.reason(second)
    assert sorted(pool.data_events(second)[1:]) == [
        "dataset alice/data@1 on n0: its copy there is used",
        "dataset alice/data@1 on n1: its copy there is used",
    ]
    assert pool.executor.data_jobs() == {job, second}


def test_without_prepare_the_workers_mount_the_versions_path(pool: Pool) -> None:
    job = pool.submit(prepare=False)
    pool.tick()
    assert pool.state(job) is JobState.RUNNING
    assert pool.data_events(job) == []
    assert set(pool.mounted(job).values()) == {"/shared/data"}


def test_a_changed_file_fails_the_job_naming_it(pool: Pool) -> None:
    pool.executor.data_changed = "train/a.bin"
    job = pool.submit()
    pool.tick()
    pool.tick(after=1)
    assert pool.state(job) in (JobState.FAILING, JobState.FAILED)
    assert "changed under its version: train/a.bin" in pool.reason(job)
    assert pool.executor.launches == []


def test_a_node_without_room_is_left_out_and_not_cordoned(pool: Pool) -> None:
    pool.executor.data_full = {"n0"}
    job = pool.submit()
    for _ in range(4):
        pool.tick(after=1)
        if pool.state(job) is JobState.RUNNING:
            break
    assert pool.state(job) is JobState.RUNNING, pool.reason(job)
    assert {launch.node for launch in pool.executor.launches} == {"n1"}
    nodes = NodeService(pool.store).list_nodes(actor=None)
    assert {n.name: n.state for n in nodes} == {"n0": NodeState.READY, "n1": NodeState.READY}
    assert any(
        "no room for a copy of dataset alice/data@1 on n0" in e.reason
        for e in pool.jobs.events(job, actor=OPS)
    )


def test_a_job_no_longer_starting_stops_its_preparation(pool: Pool) -> None:
    """What the copy's progress asks: a stopped (or requeued) job's copy goes no further."""
    from gpuyard.controller.dataprep import DataPrep
    from gpuyard.executors.base import LaunchError
    from gpuyard.store.tables import JobRow

    job = pool.submit()
    prep = DataPrep(pool.store, pool.executor, pool.clock)
    with pool.store.read() as session:
        row = session.get(JobRow, job)
        assert row is not None
        session.expunge(row)
    with pytest.raises(LaunchError, match=f"job {job} is queued: its data preparation stops"):
        prep.check_starting(row)
    pool.jobs.stop(job, actor=OPS)
    with pytest.raises(LaunchError, match="is stopped"):
        prep.check_starting(row)
