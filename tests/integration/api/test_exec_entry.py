"""Entering a job (exec run/kill/start, shells) is its owner's right; admins enter only where the
pool allows it (``GPUYARD_ADMIN_EXEC``), and each such entry is audited (issue 24, point 1).
Over real HTTP, on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo
from gpuyard.settings import Settings
from gpuyard.testing.auth import Call, TokenFor, api_caller

OWNER, ADMIN, WRITER = "olga", "ada", "wanda"


@pytest.fixture(params=[False, True], ids=["admin-exec-off", "admin-exec-on"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", admin_exec=request.param)


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
            ADMIN: token_for(ADMIN, admin=True, group="ops"),
        },
    )


def test_admins_enter_only_where_the_pool_allows_it_and_are_audited(
    call: Call, controller: Controller, settings: Settings
) -> None:
    job_id = int(
        call(OWNER, "POST", "/jobs", json={"command": "sleep 1", "access": "read-write"}).json()[
            "id"
        ]
    )
    controller.tick()
    # Anyone who may stop it may hold it: the admin does.
    assert call(ADMIN, "POST", f"/jobs/{job_id}/exec/stop").status_code == 200
    controller.tick()
    controller.tick()
    assert call(OWNER, "GET", f"/jobs/{job_id}").json()["state"] == "held"
    writer = call(WRITER, "POST", f"/jobs/{job_id}/exec/run", json={"command": ["id"]})
    assert writer.status_code == 403, writer.text
    ran = call(ADMIN, "POST", f"/jobs/{job_id}/exec/run", json={"command": ["id"]})
    entries = call(ADMIN, "GET", "/audit", params={"action": "job.exec.admin"}).json()
    if settings.admin_exec:
        assert ran.status_code == 200, ran.text
        assert [(e["actor"], e["target"], e["detail"]) for e in entries] == [
            (f"user:{ADMIN}", f"job:{job_id}", f"owner {OWNER}")
        ]
    else:
        assert ran.status_code == 403, ran.text
        assert "GPUYARD_ADMIN_EXEC" in ran.json()["detail"]
        assert entries == []
    # The owner's own entries are never admin entries.
    controller.tick()
    assert call(OWNER, "POST", f"/jobs/{job_id}/exec/kill", json={"ranks": [0]}).status_code == 200
    again = call(ADMIN, "GET", "/audit", params={"action": "job.exec.admin"}).json()
    assert len(again) == len(entries)


def test_an_admin_enters_its_own_jobs_as_their_owner(
    call: Call, controller: Controller, settings: Settings
) -> None:
    job_id = int(call(ADMIN, "POST", "/jobs", json={"command": "sleep 1"}).json()["id"])
    controller.tick()
    assert call(ADMIN, "POST", f"/jobs/{job_id}/exec/stop").status_code == 200
    controller.tick()
    controller.tick()
    ran = call(ADMIN, "POST", f"/jobs/{job_id}/exec/run", json={"command": ["id"]})
    assert ran.status_code == 200, ran.text
    assert call(ADMIN, "GET", "/audit", params={"action": "job.exec.admin"}).json() == []
