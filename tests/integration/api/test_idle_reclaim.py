"""Idle interactive jobs are reclaimed (docs/interactive.md#idle), on both databases, with the
fake executor and a fake clock: a notebook holding the node's only GPU is warned, then
suspended and held once idle past the timeout, and the GPU goes to the job waiting for it;
opening the notebook again resumes it. What JupyterLab reports and the GPUs' utilisation are
the test's (the seams ``jupyter`` and ``gpu_usage``); the real JupyterLab is in
tests/e2e/test_interactive.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.service import IdleAction
from gpuyard.models.worker import NodeInfo
from gpuyard.server.app import create_app
from gpuyard.services.idle import IdleReclaim
from gpuyard.services.interactive import ServiceTarget
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.auth import TokenFor

TIMEOUT = 3600.0


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor(
        [NodeInfo("n0", "127.0.0.1", gpus=1, cpus=64, memory=1 << 40)], exit_on_terminate=True
    )


@pytest.fixture
def app(settings: Settings, store: Store, fake_executor: FakeExecutor, clock: ManualClock) -> Any:
    return create_app(settings, store=store, executor=fake_executor, clock=clock)


class Jupyter:
    """What the notebook's JupyterLab says: its kernels' last activity, and whether one runs."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.busy = False
        self.asked: list[int] = []

    def __call__(self, target: ServiceTarget) -> tuple[float | None, bool]:
        self.asked.append(target.job_id)
        return self.last, self.busy


@pytest.fixture
def reclaim(app: Any) -> IdleReclaim:
    idle: IdleReclaim = app.state.idle
    idle.timeout = TIMEOUT
    idle.jupyter = Jupyter()
    idle.gpu_usage = dict
    return idle


@pytest.fixture
def ada(api_url: str, token_for: TokenFor) -> Client:
    return Client(api_url, token=token_for("ada"))


def _running_notebook(ada: Client, controller: Controller) -> int:
    job_id = ada.submit({"service": {"kind": "notebook"}, "resources": {"gpus": 1}}).id
    for _ in range(3):
        controller.tick()
    assert ada.job(job_id).state.value == "running"
    return job_id


def _kinds(ada: Client, job_id: int) -> list[str]:
    return [e.kind.value for e in ada.events(job_id)]


def test_an_idle_notebook_is_warned_then_suspended_and_its_gpu_goes_to_a_waiting_job(
    ada: Client, controller: Controller, clock: ManualClock, reclaim: IdleReclaim
) -> None:
    notebook = _running_notebook(ada, controller)
    waiting = ada.submit({"command": "train", "resources": {"gpus": 1}}).id
    controller.tick()
    assert ada.job(waiting).state.value == "queued"

    clock.advance(TIMEOUT - 60)
    assert reclaim.sweep() == []
    warned = [e for e in ada.events(notebook) if e.kind.value == "idle"]
    assert len(warned) == 1 and "will be suspended and held in 1m" in (warned[0].reason or "")
    assert reclaim.sweep() == [] and _kinds(ada, notebook).count("idle") == 1  # warned once

    clock.advance(120)
    assert reclaim.sweep() == [notebook]
    for _ in range(4):
        controller.tick()
    view = ada.job(notebook)
    assert (view.state.value, view.on_hold) == ("suspended", True)
    assert "idle for 1h01m" in " ".join(e.reason or "" for e in ada.events(notebook))
    assert ada.job(waiting).state.value == "running"  # the GPU went to the waiting job


def test_a_notebook_in_use_is_not_reclaimed(
    ada: Client, controller: Controller, clock: ManualClock, reclaim: IdleReclaim
) -> None:
    """A kernel that ran lately, a kernel running now, or busy GPUs: in use."""
    notebook = _running_notebook(ada, controller)
    jupyter: Any = reclaim.jupyter
    clock.advance(TIMEOUT - 10)
    jupyter.last = clock.now()  # a cell ran just now
    clock.advance(TIMEOUT - 10)
    assert reclaim.sweep() == [] and jupyter.asked == [notebook]
    clock.advance(TIMEOUT)
    jupyter.busy = True  # a long cell runs
    assert reclaim.sweep() == []
    jupyter.busy = False
    reclaim.gpu_usage = lambda: {notebook: 80.0}  # its GPU works (a training loop in it)
    clock.advance(TIMEOUT)
    assert reclaim.sweep() == []
    reclaim.gpu_usage = dict
    clock.advance(TIMEOUT - 1)  # idle since the last busy look
    assert reclaim.sweep() == []
    clock.advance(2)
    assert reclaim.sweep() == [notebook]


def test_opening_a_reclaimed_notebook_resumes_it(
    ada: Client, api_url: str, controller: Controller, clock: ManualClock, reclaim: IdleReclaim
) -> None:
    notebook = _running_notebook(ada, controller)
    clock.advance(TIMEOUT + 1)
    assert reclaim.sweep() == [notebook]
    for _ in range(4):
        controller.tick()
    assert ada.job(notebook).on_hold
    opened = httpx.get(
        f"{api_url}/proxy/{notebook}/lab", headers={"authorization": f"Bearer {ada.token}"}
    )
    assert opened.status_code == 503 and "resumed" in opened.json()["detail"]
    for _ in range(3):
        controller.tick()
    assert ada.job(notebook).state.value == "running"


def test_the_stop_action_stops_it_and_a_zero_timeout_never_reclaims(
    ada: Client, controller: Controller, clock: ManualClock, reclaim: IdleReclaim
) -> None:
    notebook = _running_notebook(ada, controller)
    clock.advance(TIMEOUT * 2)
    reclaim.timeout = 0
    assert reclaim.sweep() == []
    reclaim.timeout, reclaim.action = TIMEOUT, IdleAction.STOP
    assert reclaim.sweep() == [notebook]
    for _ in range(3):
        controller.tick()
    assert ada.job(notebook).state.value == "stopped"


def test_a_tensorboard_is_in_use_while_it_is_asked_anything(
    ada: Client, controller: Controller, clock: ManualClock, reclaim: IdleReclaim
) -> None:
    board = ada.submit({"service": {"kind": "tensorboard"}}).id
    for _ in range(3):
        controller.tick()
    clock.advance(TIMEOUT - 5)
    reclaim.interactive.activity.touch(board, method="GET")  # a page polls it
    clock.advance(TIMEOUT - 5)
    assert reclaim.sweep() == []
    clock.advance(10)
    assert reclaim.sweep() == [board]


def test_a_pool_of_its_own_timeout_reclaims_on_it(
    ada: Client,
    controller: Controller,
    clock: ManualClock,
    reclaim: IdleReclaim,
    api_url: str,
    token_for: TokenFor,
) -> None:
    """The default pool given 10 minutes by its admin: the notebook goes then, though the
    pool-wide timeout is an hour; without the pool's own (0 removes it), the hour again."""
    admin = Client(api_url, token=token_for("root", admin=True))
    with pytest.raises(Exception, match="idle_timeout"):
        admin.update_pool("default", idle_timeout=-5)
    pool = admin.update_pool("default", idle_timeout="10m")
    assert pool.idle_timeout == 600
    notebook = _running_notebook(ada, controller)
    clock.advance(540 + 1)
    assert reclaim.sweep() == []
    warned = [e for e in ada.events(notebook) if e.kind.value == "idle"]
    assert len(warned) == 1 and "in 59s" in (warned[0].reason or "")
    clock.advance(60)
    assert reclaim.sweep() == [notebook]
    assert "idle for 10m" in " ".join(e.reason or "" for e in ada.events(notebook))
    assert admin.update_pool("default", idle_timeout=0).idle_timeout is None
    reclaim.timeout = 0
    assert reclaim.sweep() == []  # the pool-wide 0: never, and the pool has none of its own
