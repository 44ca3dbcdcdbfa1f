"""Who may do what to a job, over the real HTTP API, on both databases: every cell of the
matrix (owner, admin, a member of the owner's group with read-write / read-only / no access,
a member of another group, nobody signed in) × every job action, with sharing on and off.

The expected table is written here by hand from reference 002 (他人访问权限), not computed
by the policy module it checks."""

from __future__ import annotations

import httpx
import pytest

from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo
from gpuyard.testing.auth import Call, TokenFor, api_caller

OK, FORBIDDEN, HIDDEN, SIGN_IN = "ok", 403, 404, 401

ACTIONS = ["view", "clone", "change-runtime", "change-priority", "stop", "suspend", "delete"]

# Reference 002: read-write may do all; read-only may view details and clone (and open a dev
# environment or TensorBoard, which gpuyard does not have); none may do nothing.
GROUP = {
    "read-write": dict.fromkeys(ACTIONS, OK),
    "read-only": {a: OK if a in ("view", "clone") else FORBIDDEN for a in ACTIONS},
    "none": dict.fromkeys(ACTIONS, HIDDEN),
}

OWNER, ADMIN, MEMBER, OUTSIDER = "olga", "ada", "gina", "otto"


def expected(relation: str, access: str, sharing: bool, action: str) -> object:
    if relation in ("owner", "admin"):
        return OK
    if relation == "other-group":
        return HIDDEN
    if relation == "anonymous":
        return SIGN_IN
    return GROUP[access if sharing else "none"][action]


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor([NodeInfo("n0", "127.0.0.10", gpus=0, cpus=512, memory=1 << 40)])


@pytest.fixture
def call(api_url: str, token_for: TokenFor) -> Call:
    return api_caller(
        api_url,
        {
            OWNER: token_for(OWNER, group="lab"),
            MEMBER: token_for(MEMBER, group="lab"),
            OUTSIDER: token_for(OUTSIDER, group="other"),
            ADMIN: token_for(ADMIN, admin=True, group="ops"),
        },
    )


ACTORS = {
    "owner": OWNER,
    "admin": ADMIN,
    "group": MEMBER,
    "other-group": OUTSIDER,
    "anonymous": None,
}


def _jobs(call: Call, controller: Controller, access: str) -> dict[tuple[str, str], int]:
    """A job of the owner for each (relation, action), in the state the action needs: running
    to be suspended, ended to be deleted, queued for the rest."""

    def submit() -> int:
        response = call(OWNER, "POST", "/jobs", json={"command": "sleep 1", "access": access})
        assert response.status_code == 201, response.text
        return int(response.json()["id"])

    jobs = {(relation, "suspend"): submit() for relation in ACTORS}
    controller.tick()  # they start; the others are submitted after, and stay queued
    for job_id in jobs.values():
        assert call(OWNER, "GET", f"/jobs/{job_id}").json()["state"] == "running"
    for relation in ACTORS:
        for action in ACTIONS:
            if action != "suspend":
                jobs[relation, action] = submit()
    for relation in ACTORS:
        assert call(OWNER, "POST", f"/jobs/{jobs[relation, 'delete']}/stop").status_code == 200
    return jobs


def _act(call: Call, who: str | None, action: str, job_id: int) -> httpx.Response:
    path = f"/jobs/{job_id}"
    match action:
        case "view":
            return call(who, "GET", path)
        case "clone":
            return call(who, "POST", f"{path}/clone", json={})
        case "change-runtime":
            return call(who, "PATCH", path, json={"max_runtime": "2h"})
        case "change-priority":
            return call(who, "PATCH", path, json={"priority": "low"})
        case "stop" | "suspend":
            return call(who, "POST", f"{path}/{action}")
        case "delete":
            return call(who, "DELETE", path)
    raise AssertionError(action)


@pytest.mark.parametrize("sharing", [True, False], ids=["sharing-on", "sharing-off"])
@pytest.mark.parametrize("access", ["read-write", "read-only", "none"])
def test_every_cell_of_the_job_access_matrix(
    call: Call, controller: Controller, access: str, sharing: bool
) -> None:
    jobs = _jobs(call, controller, access)
    if not sharing:
        response = call(ADMIN, "PATCH", "/settings", json={"sharing": False})
        assert response.json() == {"sharing": False}
    outcome: dict[tuple[str, str], object] = {}
    for (relation, action), job_id in jobs.items():
        response = _act(call, ACTORS[relation], action, job_id)
        status = response.status_code
        outcome[relation, action] = OK if status < 300 else status
        if status >= 400:
            detail = response.json()["detail"]
            # A refusal names no one: not the owner, not the admins.
            assert OWNER not in detail and ADMIN not in detail, detail
            if status == HIDDEN:  # word for word what a job that does not exist gets
                assert detail == f"job {job_id} does not exist"
    want = {
        (relation, action): expected(relation, access, sharing, action)
        for relation in ACTORS
        for action in ACTIONS
    }
    assert outcome == want


@pytest.mark.parametrize("access", ["read-write", "read-only", "none"])
def test_lists_show_and_views_offer_only_what_is_allowed(
    call: Call, controller: Controller, access: str
) -> None:
    job_id = int(call(OWNER, "POST", "/jobs", json={"command": "x", "access": access}).json()["id"])
    reads = ["view", "clone", "dev-environment", "tensorboard"]
    offered = [*reads, "change-runtime", "change-priority", "stop", "suspend", "delete"]
    seen = {
        who: [j["id"] for j in call(who, "GET", "/jobs").json()["items"]]
        for who in (OWNER, ADMIN, MEMBER, OUTSIDER)
    }
    assert seen == {
        OWNER: [job_id],
        ADMIN: [job_id],
        MEMBER: [] if access == "none" else [job_id],
        OUTSIDER: [],
    }
    assert call(OWNER, "GET", f"/jobs/{job_id}").json()["allowed"] == offered
    assert call(ADMIN, "GET", f"/jobs/{job_id}").json()["allowed"] == offered
    member = call(MEMBER, "GET", f"/jobs/{job_id}")
    if access == "none":
        assert member.status_code == 404
    else:
        want = offered if access == "read-write" else reads
        assert member.json()["allowed"] == want
    # Events, logs, predictions and usage of a hidden job are hidden too.
    for path in ("events", "logs", "prediction", "usage"):
        assert call(OUTSIDER, "GET", f"/jobs/{job_id}/{path}").status_code == 404


def test_with_sharing_off_a_job_may_only_ask_for_no_access(call: Call) -> None:
    assert call(OWNER, "PATCH", "/settings", json={"sharing": False}).status_code == 403
    assert call(ADMIN, "PATCH", "/settings", json={"sharing": False}).status_code == 200
    refused = call(OWNER, "POST", "/jobs", json={"command": "x", "access": "read-only"})
    assert refused.status_code == 422 and "sharing off" in refused.json()["detail"]
    assert call(OWNER, "GET", "/jobs").json()["total"] == 0
    assert call(OWNER, "POST", "/jobs", json={"command": "x"}).status_code == 201
    trail = call(ADMIN, "GET", "/audit", params={"action": "settings"}).json()
    assert [(e["actor"], e["target"], e["detail"]) for e in trail] == [
        ("user:ada", "sharing", "sharing=False")
    ]


def test_bulk_stop_and_delete_follow_the_matrix(call: Call) -> None:
    mine = call(OWNER, "POST", "/jobs", json={"command": "x", "access": "read-only"}).json()["id"]
    hidden = call(OWNER, "POST", "/jobs", json={"command": "x"}).json()["id"]
    result = call(MEMBER, "POST", "/jobs/stop", json={"ids": [mine, hidden, 999]}).json()
    assert result["done"] == []
    assert {f["id"]: f["code"] for f in result["failed"]} == {
        mine: "permission_denied",
        hidden: "not_found",
        999: "not_found",
    }
    failures = {f["id"]: f["detail"] for f in result["failed"]}
    assert failures[hidden] == f"job {hidden} does not exist"
    assert call(OWNER, "POST", "/jobs/stop", json={"ids": [mine, hidden]}).json()["done"] == [
        mine,
        hidden,
    ]
    stops = call(ADMIN, "GET", "/audit", params={"action": "job.stop"}).json()
    assert sorted(e["target"] for e in stops) == sorted([f"job:{mine}", f"job:{hidden}"])


def test_a_user_cannot_make_itself_admin_and_role_changes_are_audited(call: Call) -> None:
    response = call(MEMBER, "PATCH", f"/users/{MEMBER}", json={"role": "admin"})
    assert response.status_code == 403 and ADMIN not in response.json()["detail"]
    assert call(MEMBER, "GET", "/users/me").json()["role"] == "user"
    assert call(MEMBER, "GET", "/audit").status_code == 403
    assert call(ADMIN, "PATCH", f"/users/{MEMBER}", json={"role": "admin"}).status_code == 200
    [entry] = call(ADMIN, "GET", "/audit", params={"action": "user.update"}).json()
    assert (entry["actor"], entry["target"]) == ("user:ada", f"user:{MEMBER}")
    assert '"role":"admin"' in entry["detail"]


def test_a_shared_jobs_env_values_are_its_owners_and_admins_alone(call: Call) -> None:
    """From the CLI a job's env is its owner's shell (--export=ALL): a group member who may
    read or clone the job gets the names, never the values, and a clone of theirs leaves
    the env out."""
    env = {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "PATH": "/home/alice/venv/bin:/usr/bin"}
    spec = {"command": "x", "access": "read-write", "env": env}
    job_id = call(OWNER, "POST", "/jobs", json=spec).json()["id"]
    for who in (OWNER, ADMIN):
        assert call(who, "GET", f"/jobs/{job_id}").json()["spec"]["env"] == env
    seen = call(MEMBER, "GET", f"/jobs/{job_id}").json()["spec"]["env"]
    assert sorted(seen) == sorted(env) and "s3cr3t" not in str(seen)
    [listed] = call(MEMBER, "GET", "/jobs").json()["items"]
    assert "s3cr3t" not in str(listed)
    # An action's answer shows no more than a read: priority, runtime, stop.
    for method, path, body in (
        ("PATCH", f"/jobs/{job_id}", {"priority": "low"}),
        ("PATCH", f"/jobs/{job_id}", {"max_runtime": "2h"}),
    ):
        answer = call(MEMBER, method, path, json=body)
        assert answer.status_code == 200, answer.text
        assert "s3cr3t" not in answer.text
    clone = call(MEMBER, "POST", f"/jobs/{job_id}/clone", json={})
    assert clone.status_code == 201, clone.text
    assert clone.json()["spec"]["env"] == {}
    own = call(OWNER, "POST", f"/jobs/{job_id}/clone", json={}).json()
    assert own["spec"]["env"] == env
    stopped = call(MEMBER, "POST", f"/jobs/{job_id}/stop")
    assert stopped.status_code == 200 and "s3cr3t" not in stopped.text
