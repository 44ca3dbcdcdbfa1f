"""Pulling a job's image as a phase of its start (docs/images.md#pulling), against the fake
executor's nodes and a manual clock: the events and reason it shows, one pull per node and
image, and a registry that cannot be reached (the job waits, retries, then fails)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.lifecycle import LaunchConfig
from gpuyard.controller.loop import Controller
from gpuyard.controller.pulls import RETRY_EVERY
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec, JobState
from gpuyard.models.worker import NodeInfo
from gpuyard.services.images import ImagePinner
from gpuyard.services.jobs import JobService
from gpuyard.store.engine import Store
from gpuyard.testing.auth import OPS, ensure_ops

IMAGE = "registry.test/alice/train:1@sha256:" + "ab" * 32
TIMEOUT = 60.0
NODES = [
    NodeInfo("n0", "10.0.0.1", gpus=0, cpus=8, memory=1 << 35),
    NodeInfo("n1", "10.0.0.2", gpus=0, cpus=8, memory=1 << 35),
]


class _AlreadyPinned(ImagePinner):
    """The tests' references name their digest already: nothing to ask a registry."""

    def pinned(self, specs: Sequence[JobSpec], *, owner: str) -> list[JobSpec]:
        return list(specs)


class Pool:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.clock = clock
        self.executor = FakeExecutor(NODES)
        config = LaunchConfig(image_pull_timeout=TIMEOUT)
        self.controller = Controller(
            store, self.executor, clock=clock, control_url="http://cp", launch_config=config
        )
        self.controller.register_nodes()
        self.jobs = JobService(
            store,
            clock=clock,
            notify=self.controller.notify,
            images=_AlreadyPinned(None, lambda _user, _ref: True),
        )
        ensure_ops(store)

    def submit(self, nodes: int = 1) -> int:
        spec = JobSpec.model_validate(
            {"command": "python train.py", "image": IMAGE, "nodes": nodes}
        )
        return self.jobs.submit(spec, owner="alice").id

    def state(self, job_id: int) -> JobState:
        return self.jobs.get(job_id, actor=OPS).state

    def reason(self, job_id: int) -> str:
        return self.jobs.get(job_id, actor=OPS).reason or ""

    def image_events(self, job_id: int) -> list[str]:
        return [e.reason for e in self.jobs.events(job_id, actor=OPS) if e.kind == "image"]

    def tick(self, after: float = 0.0) -> None:
        self.clock.advance(after)
        self.controller.tick()


@pytest.fixture
def pool(store: Store, clock: ManualClock) -> Pool:
    return Pool(store, clock)


def test_each_node_pulls_the_image_once_and_says_so(pool: Pool) -> None:
    job = pool.submit(nodes=2)
    pool.tick()
    assert pool.state(job) is JobState.RUNNING
    events = pool.image_events(job)
    assert [e.split(" on ")[0] for e in events] == [
        f"pulling image {IMAGE}",
        f"pulled image {IMAGE}",
    ] * 2
    assert f"pulling image {IMAGE} on n0" in events
    assert any(e.startswith(f"pulled image {IMAGE} on n1: 1Mi in ") for e in events)
    assert pool.reason(job) == ""  # the pull is over: nothing is waited for
    for rank in (0, 1):
        pool.executor.exit(job, rank, code=0)
    pool.tick(after=1)
    second = pool.submit(nodes=2)
    pool.tick(after=1)
    assert pool.state(second) is JobState.RUNNING, pool.reason(second)
    assert pool.image_events(second) == []  # both nodes hold it already
    assert pool.executor.pulls == [("n0", IMAGE), ("n1", IMAGE)]


def test_a_job_waits_for_an_unreachable_registry_and_starts_once_it_answers(pool: Pool) -> None:
    pool.executor.registry_down = "registry registry.test cannot be reached (refused)"
    job = pool.submit()
    pool.tick()
    assert pool.state(job) is JobState.STARTING
    assert "cannot be reached" in pool.reason(job)
    assert "failing in 1m00s" in pool.reason(job)
    assert pool.executor.launches == []
    pool.tick()  # too soon to try again
    assert len(pool.executor.pulls) == 1
    pool.tick(after=RETRY_EVERY)
    assert len(pool.executor.pulls) == 2
    waits = [e for e in pool.image_events(job) if "cannot be reached" in e]
    assert len(waits) == 1  # the same reason again is not a new event
    pool.executor.registry_down = ""
    pool.tick(after=RETRY_EVERY)
    assert pool.state(job) is JobState.RUNNING
    assert pool.image_events(job)[-1].startswith(f"pulled image {IMAGE} on n")


def test_a_job_fails_once_the_registry_stays_away_past_the_timeout(pool: Pool) -> None:
    pool.executor.registry_down = "registry registry.test cannot be reached (refused)"
    job = pool.submit()
    pool.tick()
    waited = 0.0
    while waited <= TIMEOUT and pool.state(job) is JobState.STARTING:
        pool.tick(after=RETRY_EVERY)
        waited += RETRY_EVERY
    pool.tick()
    assert pool.state(job) in (JobState.FAILING, JobState.FAILED)
    reason = pool.reason(job)
    assert "cannot be reached" in reason and "GPUYARD_IMAGE_PULL_TIMEOUT" in reason
    assert waited >= TIMEOUT - RETRY_EVERY  # not before the timeout
    assert pool.executor.launches == []


def test_a_node_that_pulled_the_image_is_preferred_for_the_next_job_in_it(pool: Pool) -> None:
    # A job without an image fills n0, so the first job in the image lands on n1.
    blocker = pool.jobs.submit(
        JobSpec.model_validate({"command": "sleep 1", "resources": {"cpus": 8}}), owner="alice"
    ).id
    first = pool.submit()
    pool.tick()
    assert pool.executor.pulls == [("n1", IMAGE)]
    pool.executor.exit(blocker, 0, code=0)
    pool.executor.exit(first, 0, code=0)
    pool.tick(after=1)
    assert pool.state(first) is JobState.SUCCEEDED
    # Both nodes are free and alike: the next job in the image goes where it is held already
    # (by node order alone it would take n0 and pull again).
    second = pool.submit()
    pool.tick(after=1)
    assert pool.state(second) is JobState.RUNNING, pool.reason(second)
    assert pool.executor.pulls == [("n1", IMAGE)]
    assert pool.image_events(second) == []
