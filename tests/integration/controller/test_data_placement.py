"""The controller tells the scheduler which nodes hold which prepared dataset versions
(docs/datasets.md, "Data preparation"), through the fake executor: a job goes to the node that
holds its copy when the nodes are otherwise equal, and a queued job's predicted start counts
the copy its nodes lack."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.dataprep import copy_key
from gpuyard.models.dataset import Manifest, ManifestFile
from gpuyard.models.worker import NodeInfo
from gpuyard.scheduler import COPY_RATE
from gpuyard.services.jobs import JobService
from gpuyard.services.scheduling import SchedulingService
from gpuyard.store.engine import Store
from gpuyard.testing.auth import OPS, ensure_ops
from gpuyard.testing.datasets import ready_version

NODES = [
    NodeInfo("n0", "10.0.0.1", gpus=4, cpus=8, memory=1 << 35),
    NodeInfo("n1", "10.0.0.2", gpus=4, cpus=8, memory=1 << 35),
]
MANIFEST = Manifest(files=[ManifestFile(path="train/a.bin", size=20 << 30, sha256="ab" * 32)])


class Pool:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.store = store
        self.clock = clock
        self.executor = FakeExecutor(NODES)
        self.controller = Controller(store, self.executor, clock=clock, control_url="http://cp")
        self.controller.register_nodes()
        self.jobs = JobService(store, clock=clock, notify=self.controller.notify)
        self.scheduling = SchedulingService(
            store, clock=clock, data_locality=self.controller.locality.apply
        )
        ensure_ops(store)
        self.version = ready_version(store, MANIFEST)

    def hold_copy(self, node: str) -> None:
        """``node``'s data cache holds the version (a copy an earlier job left)."""
        self.executor.data_copies[node, copy_key(self.version, MANIFEST.digest())] = set()

    def submit(
        self, *, prepare: bool = True, gpus: int = 0, cpus: int = 1, nodes: int = 1, **more: object
    ) -> int:
        mount = {
            "name": "data",
            "dataset": "alice/data@1",
            "dataset_version": self.version,
            "path": "/shared/data",
            "prepare": prepare,
        }
        spec = JobSpec.model_validate(
            {
                "command": "python train.py",
                "nodes": nodes,
                "resources": {"gpus": gpus, "cpus": cpus},
                "mounts": {"datasets": [mount]},
                **more,
            }
        )
        return self.jobs.submit(spec, owner="alice").id

    def placed_on(self, job_id: int) -> list[str]:
        return sorted(
            {launch.node for launch in self.executor.launches if launch.key.job_id == job_id}
        )

    def data_events(self, job_id: int) -> list[str]:
        return [e.reason for e in self.jobs.events(job_id, actor=OPS) if e.kind == "data"]


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, clock)


@pytest.mark.parametrize(("holder", "placed"), [(None, "n0"), ("n0", "n0"), ("n1", "n1")])
def test_of_two_equal_nodes_the_job_takes_the_one_holding_its_copy(
    pool: Pool, holder: str | None, placed: str
) -> None:
    if holder is not None:
        pool.hold_copy(holder)
    job = pool.submit()
    pool.controller.tick()
    assert pool.jobs.get(job, actor=OPS).state is JobState.RUNNING
    assert pool.placed_on(job) == [placed]
    used = f"dataset alice/data@1 on {placed}: its copy there is used"
    assert (used in pool.data_events(job)) is (holder is not None)


def test_a_better_fit_is_not_given_up_for_the_copy(pool: Pool) -> None:
    pool.hold_copy("n1")
    first = pool.submit(prepare=False, gpus=2)
    pool.controller.tick()
    assert pool.placed_on(first) == ["n0"]
    job = pool.submit(gpus=2)  # n0's 2 free GPUs fit it best; n1 holds the copy
    pool.controller.tick()
    assert pool.placed_on(job) == ["n0"]


@pytest.mark.parametrize(("holders", "copied"), [((), 2), (("n1",), 1), (("n0", "n1"), 0)])
def test_a_queued_jobs_predicted_start_counts_the_copy_its_nodes_lack(
    pool: Pool, holders: tuple[str, ...], copied: int
) -> None:
    for node in holders:
        pool.hold_copy(node)
    now = pool.clock.now()
    blocker = pool.submit(prepare=False, cpus=8, nodes=2, max_runtime=600)
    pool.controller.tick()
    assert pool.placed_on(blocker) == ["n0", "n1"]
    job = pool.submit(cpus=8, nodes=2)
    pool.controller.tick()
    on_demand = pool.scheduling.prediction(job, actor=OPS)  # before any forecast
    assert pool.controller.forecaster.run_once() == 1

    # Both nodes copy at once: the time is one node's copy, if either lacks it.
    copy = MANIFEST.size / COPY_RATE if copied else 0.0
    expected = datetime.fromtimestamp(now + 600 + copy, UTC)
    predicted = pool.scheduling.prediction(job, actor=OPS)
    assert on_demand == predicted
    assert predicted.start_at == expected
    after = " (about 1m47s)" if copied else ""
    assert predicted.reason == f"starts in about {'11m47s' if copied else '10m00s'}" + (
        ", its data copied first" + after if copied else ""
    )
    shown = pool.jobs.get(job, actor=OPS)  # what gpuyard show and the job's page say
    assert shown.start_at == expected
