"""/api/v1/jobs/{id}/exec over real HTTP, on both databases: who may (those who may stop the
job hold it; only its owner runs code in it), what a refusal says, and bad input refused before
anything is stored."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo
from gpuyard.testing.auth import Call, TokenFor, api_caller

OWNER, ADMIN, WRITER, READER, OUTSIDER = "olga", "ada", "wanda", "rita", "otto"

ACTIONS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "status": ("GET", "", None),
    "stop": ("POST", "/stop", {"hold": "10m"}),
    "start": ("POST", "/start", None),
    "run": ("POST", "/run", {"command": ["hostname"]}),
    "checker": ("POST", "/run", {"target": "checker"}),
    "kill": ("POST", "/kill", {"ranks": [0]}),
}


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor([NodeInfo("n0", "127.0.0.10", gpus=0, cpus=512, memory=1 << 40)])


@pytest.fixture
def call(api_url: str, token_for: TokenFor) -> Call:
    return api_caller(
        api_url,
        {
            OWNER: token_for(OWNER, group="lab"),
            WRITER: token_for(WRITER, group="lab"),
            READER: token_for(READER, group="lab"),
            OUTSIDER: token_for(OUTSIDER, group="other"),
            ADMIN: token_for(ADMIN, admin=True, group="ops"),
        },
    )


def held_job(call: Call, controller: Controller, access: str = "read-only") -> int:
    response = call(OWNER, "POST", "/jobs", json={"command": "sleep 1", "access": access})
    job_id = int(response.json()["id"])
    controller.tick()
    assert call(OWNER, "POST", f"/jobs/{job_id}/exec/stop").status_code == 200
    controller.tick()
    controller.tick()
    assert call(OWNER, "GET", f"/jobs/{job_id}").json()["state"] == "held"
    return job_id


def act(call: Call, who: str | None, action: str, job_id: int) -> httpx.Response:
    method, path, body = ACTIONS[action]
    return call(who, method, f"/jobs/{job_id}/exec{path}", json=body)


@pytest.mark.parametrize("action", list(ACTIONS))
def test_only_those_who_may_stop_the_job_may_hold_it_and_only_its_owner_enters_it(
    call: Call, controller: Controller, action: str
) -> None:
    job_id = held_job(call, controller, access="read-only")
    reader = act(call, READER, action, job_id)
    assert reader.status_code == 403, reader.text
    assert "read-only" in reader.json()["detail"]
    assert OWNER not in reader.json()["detail"]
    hidden = act(call, OUTSIDER, action, job_id)
    assert (hidden.status_code, hidden.json()["detail"]) == (404, f"job {job_id} does not exist")
    assert act(call, None, action, job_id).status_code == 401
    # Nothing of theirs was recorded.
    faults = call(OWNER, "GET", f"/jobs/{job_id}/faults").json()
    assert [f["cause"] for f in faults] == ["exec stop"]
    # Its owner may; an admin may hold it, and enters it only where the pool allows it
    # (test_exec_entry.py).
    for who in (OWNER, ADMIN) if action in ("status", "stop") else (OWNER,):
        response = act(call, who, action, job_id)
        assert response.status_code == 200, (who, response.text)


def test_a_member_with_read_write_access_holds_but_never_enters_and_every_call_is_a_usercall(
    call: Call, controller: Controller
) -> None:
    """Read-write lets a member stop the job, never run code as its owner (issue 24, 1)."""
    job_id = held_job(call, controller, access="read-write")
    for action in ("run", "checker", "kill", "start"):
        refused = act(call, WRITER, action, job_id)
        assert refused.status_code == 403, (action, refused.text)
        assert "only its owner may" in refused.json()["detail"]
    assert act(call, WRITER, "stop", job_id).status_code == 200
    ran = act(call, OWNER, "run", job_id)
    assert ran.status_code == 200, ran.text
    assert ran.json()["ranks"] == [200_000]
    controller.tick()
    status = act(call, WRITER, "status", job_id).json()
    assert [(w["rank"], w["role"], w["command"]) for w in status["workers"]] == [
        (0, "worker", None),
        (200_000, "exec", ["hostname"]),
    ]
    assert status["state"] == "held" and status["held_until"] is not None
    assert act(call, OWNER, "kill", job_id).status_code == 200
    entries = call(OWNER, "GET", f"/jobs/{job_id}/faults").json()
    assert [(e["kind"], e["cause"], e["actor"]) for e in entries] == [
        ("usercall", "exec stop", f"user:{OWNER}"),
        ("usercall", "exec stop --hold 10m00s", f"user:{WRITER}"),
        ("usercall", "exec run hostname", f"user:{OWNER}"),
        ("usercall", "exec kill 0", f"user:{OWNER}"),
    ]
    trail = call(ADMIN, "GET", "/audit", params={"action": "job.exec"}).json()
    assert [(e["actor"], e["detail"]) for e in trail] == [
        (f"user:{OWNER}", "exec stop"),
        (f"user:{WRITER}", "exec stop --hold 10m00s"),
        (f"user:{OWNER}", "exec run hostname"),
        (f"user:{OWNER}", "exec kill 0"),
    ]


def test_a_run_on_a_job_that_is_not_held_is_a_clear_409(call: Call, controller: Controller) -> None:
    job_id = int(call(OWNER, "POST", "/jobs", json={"command": "sleep 1"}).json()["id"])
    queued = act(call, OWNER, "run", job_id)
    assert queued.status_code == 409
    assert queued.json()["detail"] == (
        f"job {job_id} is not held, so you cannot run a command in it: it is queued"
    )
    controller.tick()
    running = act(call, OWNER, "run", job_id)
    assert running.status_code == 409
    assert running.json()["detail"].endswith(
        f"it runs; hold it first (`gpuyard exec {job_id} stop`)"
    )
    assert running.json()["state"] == "running"


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/run", {"command": []}, 422, "command is empty"),
        ("/run", {"command": [""]}, 422, "command is empty"),
        ("/run", {"command": ["A=1", "python"]}, 422, "A=… sets an environment variable"),
        ("/run", {"target": "checker", "command": ["x"]}, 422, "it takes no command"),
        ("/run", {"command": ["x" * 70_000]}, 422, "at most 65536 are taken"),
        ("/run", {"command": ["ls"], "target": "nope"}, 422, "target"),
        ("/kill", {"ranks": []}, 422, "ranks"),
        ("/kill", {"ranks": [-1]}, 422, "no worker has rank -1"),
        ("/kill", {"ranks": [5]}, 404, "has no worker 5 in its attempt 0"),
        ("/stop", {"hold": "3d"}, 422, "hold"),
        ("/stop", {"hold": 0}, 422, "hold"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    call: Call, controller: Controller, path: str, body: dict[str, Any], status: int, words: str
) -> None:
    job_id = held_job(call, controller)
    response = call(OWNER, "POST", f"/jobs/{job_id}/exec{path}", json=body)
    assert response.status_code == status, response.text
    assert words in response.json()["detail"]
    faults = call(OWNER, "GET", f"/jobs/{job_id}/faults").json()
    assert [f["cause"] for f in faults] == ["exec stop"]
    assert [w["rank"] for w in act(call, OWNER, "status", job_id).json()["workers"]] == [0]
