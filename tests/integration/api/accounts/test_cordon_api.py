"""Cordon, drain and uncordon over real HTTP: admins only, a reason always, nothing placed on a
cordoned node, the jobs on a drained node suspended to resume elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuyard.client import Client
from gpuyard.controller.loop import Controller

Refuse = Callable[..., dict[str, Any]]


def test_cordon_is_for_admins_with_a_reason_and_keeps_new_jobs_off_the_node(
    client: Client, admin: Client, refuse: Refuse, controller: Controller
) -> None:
    body = {"reason": "fan failure"}
    refuse(
        "POST",
        "/nodes/n1/cordon",
        user="alice",
        status=403,
        says="only admins may cordon nodes",
        json=body,
    )
    refuse(
        "POST", "/nodes/nx/cordon", user="ada", status=404, says="node nx does not exist", json=body
    )
    refuse("POST", "/nodes/n1/cordon", user="ada", status=422, says="reason", json={"reason": ""})
    refuse("POST", "/nodes/n1/uncordon", user="ada", status=409, says="node n1 is not cordoned")

    view = admin.cordon("n1", "fan failure")
    assert (view.state.value, view.cordon_reason, view.cordoned_by) == (
        "cordoned",
        "fan failure",
        "user:ada",
    )
    assert view.cordoned_at is not None
    job = client.submit({"command": "python train.py", "node_names": ["n1"]})
    controller.tick()
    assert client.job(job.id).state.value == "queued"  # nothing starts on a cordoned node

    refuse(
        "POST",
        "/nodes/n1/uncordon",
        user="alice",
        status=403,
        says="only admins may uncordon nodes",
    )
    back = admin.uncordon("n1")
    assert (back.state.value, back.cordon_reason, back.cordoned_by) == ("ready", None, None)
    controller.tick()
    assert client.job(job.id).state.value in {"starting", "running"}


def test_drain_suspends_the_jobs_on_the_node(
    client: Client, admin: Client, controller: Controller
) -> None:
    job = client.submit({"command": "python train.py", "node_names": ["n2"]})
    controller.tick()
    controller.tick()
    assert client.job(job.id).state.value == "running"
    view = admin.cordon("n2", "replace a DIMM", drain=True)
    assert view.state.value == "cordoned"
    assert client.job(job.id).state.value == "suspending"
    events = [e.reason for e in client.events(job.id)]
    assert any("node n2 is drained by ada: replace a DIMM" in e for e in events)


def test_a_pools_allreduce_floor_is_set_shown_and_removed(admin: Client, refuse: Refuse) -> None:
    body = {"name": "ib", "allreduce_floor": -1}
    refuse("POST", "/pools", user="ada", status=422, says="allreduce_floor", json=body)
    pool = admin.create_pool("ib", allreduce_floor=18.0)
    assert pool.allreduce_floor == 18.0
    assert admin.update_pool("ib", allreduce_floor=100).allreduce_floor == 100.0
    assert admin.update_pool("ib", allreduce_floor=0).allreduce_floor is None
