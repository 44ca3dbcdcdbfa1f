"""Suspend and queue predictions through the HTTP API, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.models import JobSpec

Refuse = Callable[..., dict[str, Any]]


def spec(**fields: object) -> JobSpec:
    fields.setdefault("command", "python train.py")
    return JobSpec.model_validate(fields)


def test_a_dry_run_predicts_and_stores_nothing(
    client: Client, controller: Controller, refuse: Refuse
) -> None:
    prediction = client.predict(spec(resources={"gpus": 8}))
    assert (prediction.now, prediction.reason) == (True, "starts now")
    assert client.jobs().total == 0
    # What submit would refuse, the dry run refuses too, with the same words.
    refuse(
        "POST",
        "/jobs/predict",
        user="alice",
        status=403,
        says="priority highest is not open to alice",
        json={"command": "python t.py", "priority": "highest"},
    )
    refuse(
        "POST",
        "/jobs/predict",
        user="alice",
        status=422,
        says="can never run",
        json={"command": "python t.py", "resources": {"gpus": 9}},
    )


def test_a_queued_job_is_told_when_it_should_start(
    client: Client, controller: Controller, clock: ManualClock
) -> None:
    first = client.submit({"command": "python a.py", "nodes": 4, "resources": {"gpus": 8},
                           "max_runtime": "10m"})  # fmt: skip
    controller.tick()
    second = client.submit({"command": "python b.py", "resources": {"gpus": 8}})
    prediction = client.prediction(second.id)
    assert prediction.now is False and prediction.waits_for == [first.id]
    assert prediction.start_at is not None
    assert round(prediction.start_at.timestamp() - clock.now()) == 600
    assert prediction.reason == "starts in about 10m00s"
    dry = client.predict(spec(resources={"gpus": 8}))
    assert dry.ahead == [second.id]  # a new job would queue behind the one already waiting


def test_suspend_by_hand_follows_the_rules(
    client: Client, admin: Client, controller: Controller, refuse: Refuse
) -> None:
    job = client.submit({"command": "python a.py", "resources": {"gpus": 1}})
    refuse("POST", f"/jobs/{job.id}/suspend", user="alice", status=409, says="only a running job")
    refuse("GET", f"/jobs/{job.id + 1}/prediction", user="alice", status=404, says="does not exist")
    controller.tick()
    # Someone else's job is not theirs to see: the answer is that of a job that does not exist.
    body = refuse(
        "POST", f"/jobs/{job.id}/suspend", user="mallory", status=404, says="does not exist"
    )
    assert "alice" not in body["detail"]
    refuse("GET", f"/jobs/{job.id}/prediction", user="alice", status=409, says="not queued")
    assert client.suspend(job.id).state.value == "suspending"
    assert admin.suspend(job.id).state.value == "suspending"  # twice is not an error


def test_suspend_with_a_hold_is_a_pause_through_the_api(
    client: Client, controller: Controller, refuse: Refuse
) -> None:
    job = client.submit({"command": "python a.py", "resources": {"gpus": 1}})
    controller.tick()
    refuse(
        "POST",
        f"/jobs/{job.id}/suspend",
        user="mallory",
        status=404,
        says="does not exist",
        json={"hold": True},
    )
    refuse("POST", f"/jobs/{job.id}/hold", user="alice", status=409, says="suspend --hold")
    refuse(
        "POST",
        f"/jobs/{job.id}/suspend",
        user="alice",
        status=422,
        says="hold",
        json={"hold": "maybe"},
    )
    assert not client.job(job.id).on_hold
    view = client.suspend(job.id, hold=True)
    assert (view.state.value, view.on_hold) == ("suspending", True)
    assert client.hold_many([job.id], held=False).done == [job.id]  # gpuyard resume
    assert not client.job(job.id).on_hold
