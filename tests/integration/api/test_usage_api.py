"""Usage over the real HTTP API, on both databases: a job's series to whoever may view it (as
if it did not exist to anyone else), a node's to any signed-in user, and the pool now."""

from __future__ import annotations

import httpx
import pytest

from gpuyard.client import Client, InvalidSpec, NotFound, Unauthenticated
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.usage import NodeUsage, Window
from gpuyard.models.worker import NodeInfo
from gpuyard.testing.auth import AsUser

MiB = 1 << 20


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor(
        [NodeInfo(f"n{i}", f"10.0.0.{i}", gpus=8, cpus=32, memory=1 << 38) for i in range(2)]
    )


def running(client: Client, controller: Controller, **spec: object) -> int:
    job = client.submit({"command": "python train.py", **spec})
    controller.tick()
    controller.tick()
    assert client.job(job.id).state.value == "running"
    return job.id


def sample_twice(
    controller: Controller, executor: FakeExecutor, clock: ManualClock, figures: dict[int, dict]
) -> None:
    """Two samples 10 s apart; ``figures``: job -> its worker 0's (CPU seconds are per 10 s)."""
    for round_ in range(2):
        for job, f in figures.items():
            executor.use(
                job,
                cpu_seconds=round_ * 10 * f.get("cores", 0.0),
                memory=f.get("memory"),
                gpu_util=f.get("gpu_util"),
            )
        controller.sampler.sample_once()
        clock.advance(10)


def test_a_jobs_usage_is_shown_to_whoever_may_view_it(
    as_user: AsUser,
    controller: Controller,
    fake_executor: FakeExecutor,
    clock: ManualClock,
) -> None:
    alice, bob, ada = as_user("alice"), as_user("bob", group="other"), as_user("ada", admin=True)
    job = running(alice, controller, resources={"gpus": 8})
    sample_twice(controller, fake_executor, clock, {job: {"cores": 1.5, "memory": 64 * MiB}})

    usage = alice.job_usage(job)
    assert (usage.job_id, usage.window, usage.step) == (job, Window.REALTIME, 10.0)
    [worker] = usage.workers
    assert (worker.attempt, worker.rank) == (0, 0)
    assert [(p.cpu, p.memory, p.gpu_util) for p in worker.points] == [
        (None, 64 * MiB, None),  # the first sample has no CPU rate yet; no GPU measured
        (1.5, 64 * MiB, None),
    ]
    assert ada.job_usage(job) == usage
    with pytest.raises(NotFound, match=f"job {job} does not exist"):
        bob.job_usage(job)  # not his to view: as if it did not exist, like GET /jobs/{id}
    hour = alice.job_usage(job, window="1h")
    assert (hour.window, hour.step) == (Window.HOUR, 60.0)
    with pytest.raises(InvalidSpec):
        alice.job_usage(job, window="2h")
    with pytest.raises(NotFound):
        alice.job_usage(job + 100)


def test_a_readonly_group_member_may_see_the_usage(
    as_user: AsUser, controller: Controller, fake_executor: FakeExecutor, clock: ManualClock
) -> None:
    olga, gina = as_user("olga", group="lab"), as_user("gina", group="lab")
    job = running(olga, controller, access="read-only")
    sample_twice(controller, fake_executor, clock, {job: {"memory": MiB}})
    assert len(gina.job_usage(job).workers) == 1


def test_a_nodes_usage_and_the_pool_now(
    as_user: AsUser,
    controller: Controller,
    fake_executor: FakeExecutor,
    clock: ManualClock,
    api_url: str,
) -> None:
    alice, bob = as_user("alice"), as_user("bob", group="other")
    busy = running(alice, controller, resources={"gpus": 8})
    idle = running(alice, controller, resources={"gpus": 8})
    fake_executor.use_node("n0", NodeUsage(cpu_seconds=0.0, memory=5 << 30, gpu_util=97.0))
    sample_twice(
        controller,
        fake_executor,
        clock,
        {busy: {"cores": 3.0, "memory": 2 << 30, "gpu_util": 95.0}, idle: {"memory": MiB}},
    )
    node = alice.node_usage("n0", window=Window.REALTIME)
    assert [(p.memory, p.gpu_util) for p in node.points] == [(5 << 30, 97.0)] * 2
    with pytest.raises(NotFound, match="node n9 does not exist"):
        alice.node_usage("n9")

    now = alice.usage()
    assert [j.id for j in now.jobs] == [busy, idle]  # busiest first
    top = now.jobs[0]
    assert (top.owner, top.cpu, top.memory, top.gpu_util) == ("alice", 3.0, 2 << 30, 95.0)
    assert now.jobs[1].gpu_util is None and now.jobs[1].cpu == 0.0
    assert [n.name for n in now.nodes] == ["n0", "n1"]
    assert now.nodes[0].gpu_util == 97.0
    assert bob.usage().jobs == []  # he may view neither
    assert len(alice.usage(limit=1).jobs) == 1
    with pytest.raises(Unauthenticated):
        Client(api_url, token="nonsense").usage()
    response = httpx.get(f"{api_url}/api/v1/nodes/n0/usage")
    assert response.status_code == 401
