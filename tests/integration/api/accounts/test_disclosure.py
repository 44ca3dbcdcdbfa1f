"""What a user can see of others' jobs where a response names jobs that are not its subject:
the nodes (API and web page) and queue predictions (issue 24, point 10). Over real HTTP, on
SQLite and PostgreSQL: a job the viewer may not see is counted, never named."""

from __future__ import annotations

from typing import Any

import httpx

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobSpec
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.auth import AsUser, TokenFor, user_token
from gpuyard.testing.server import serve

WHOLE_POOL = {"command": "python secret_train.py", "nodes": 4, "resources": {"gpus": 8}}
"""Every GPU of the four nodes, with no max runtime: whatever comes next waits for it."""


def fill_the_pool(client: Client, controller: Controller, name: str) -> int:
    job = client.submit({**WHOLE_POOL, "name": name}).id
    controller.tick()
    return job


def test_the_nodes_name_only_the_jobs_the_caller_may_see(
    client: Client, as_user: AsUser, admin: Client, controller: Controller
) -> None:
    job = fill_the_pool(client, controller, "alice-secret-run")
    bob = as_user("bob")
    for node in bob.nodes():
        assert (node.jobs, node.hidden_jobs, node.gpus_used) == ([], 1, 8)
    assert (bob.node("n0").jobs, bob.node("n0").hidden_jobs) == ([], 1)
    assert all((n.jobs, n.hidden_jobs) == ([job], 0) for n in client.nodes())
    assert all((n.jobs, n.hidden_jobs) == ([job], 0) for n in admin.nodes())


def test_a_job_shared_with_its_group_is_named_to_the_group_only(
    as_user: AsUser, controller: Controller
) -> None:
    dave, carol = as_user("dave", group="vision"), as_user("carol", group="vision")
    bob = as_user("bob")  # of another group
    shared = dave.submit(
        {"command": "python t.py", "resources": {"gpus": 8}, "access": "read-only"}
    )
    private = dave.submit({"command": "python t.py", "resources": {"gpus": 8}})
    controller.tick()
    seen = {name: [(n.jobs, n.hidden_jobs) for n in c.nodes() if n.jobs or n.hidden_jobs]
            for name, c in (("carol", carol), ("bob", bob))}  # fmt: skip
    assert sorted(seen["carol"]) == [([], 1), ([shared.id], 0)]
    assert sorted(seen["bob"]) == [([], 1), ([], 1)]
    assert private.id not in {j for n in carol.nodes() for j in n.jobs}


def test_the_nodes_page_shows_what_others_hold_but_not_their_names(
    api_url: str, client: Client, token_for: TokenFor, controller: Controller
) -> None:
    job = fill_the_pool(client, controller, "alice-secret-run")
    with httpx.Client(base_url=api_url, timeout=30) as web:
        signed = web.post("/login", data={"token": token_for("bob"), "next": "/nodes"})
        assert signed.status_code in (200, 303), signed.text
        page = web.get("/nodes")
        assert page.status_code == 200
        assert "alice-secret-run" not in page.text and f"/jobs/{job}" not in page.text
        assert "another user&#39;s job" in page.text or "another user's job" in page.text
    with httpx.Client(base_url=api_url, timeout=30) as web:
        web.post("/login", data={"token": token_for("alice"), "next": "/nodes"})
        page = web.get("/nodes")
        assert "alice-secret-run" in page.text and f"/jobs/{job}" in page.text


def test_a_prediction_counts_the_jobs_it_waits_for_that_the_caller_may_not_see(
    client: Client, as_user: AsUser, admin: Client, controller: Controller
) -> None:
    job = fill_the_pool(client, controller, "alice-secret-run")
    spec = JobSpec.model_validate({"command": "python b.py", "resources": {"gpus": 8}})
    bob = as_user("bob")
    told = bob.predict(spec)
    assert (told.waits_for, told.hidden_waits_for) == ([], 1)
    assert told.reason == "no start time can be given: it waits for a job of another user, " \
        "with no max runtime"  # fmt: skip
    queued = bob.submit({"command": "python b.py", "resources": {"gpus": 8}})
    stored = bob.prediction(queued.id)
    assert (stored.waits_for, stored.hidden_waits_for) == ([], 1)
    assert str(job) not in stored.reason
    # Whoever may see the job gets its id.
    assert client.predict(spec).waits_for == [job]
    assert admin.prediction(queued.id).waits_for == [job]


def test_a_prediction_counts_the_queued_jobs_ahead_that_the_caller_may_not_see(
    client: Client, as_user: AsUser, admin: Client, controller: Controller
) -> None:
    client.submit({**WHOLE_POOL, "max_runtime": "10m"})
    controller.tick()
    queued = as_user("bob").submit({**WHOLE_POOL, "name": "bob-secret-run"})
    spec = JobSpec.model_validate({"command": "python e.py", "resources": {"gpus": 8}})
    behind = as_user("erin").predict(spec)
    assert (behind.ahead, behind.hidden_ahead) == ([], 1)
    assert (behind.waits_for, behind.hidden_waits_for) == ([], 1)
    assert behind.reason.endswith("behind a job of another user"), behind.reason
    assert str(queued.id) not in behind.reason
    assert admin.predict(spec).ahead == [queued.id]


def test_a_reason_names_only_the_jobs_the_caller_may_see(
    client: Client, as_user: AsUser, admin: Client, controller: Controller
) -> None:
    """Erin's job waits behind alice's, which goes first: erin is told it waits behind a job
    of another user, in the job, the list and the search alike; an admin gets the id."""
    most = {"command": "python t.py", "nodes": 4, "resources": {"gpus": 6}}  # 2 GPUs free each
    as_user("bob").submit(most)
    controller.tick()
    first = client.submit({"command": "python t.py", "resources": {"gpus": 4}}).id
    erin = as_user("erin")
    hers = erin.submit({"command": "python t.py", "resources": {"gpus": 4}}).id
    controller.tick()
    assert f"behind job {first}, which goes first" in (admin.job(hers).reason or "")
    told = erin.job(hers).reason or ""
    assert told.endswith("; behind a job of another user, which goes first"), told
    listed = {j.id: j.reason or "" for j in erin.jobs().items}
    assert listed[hers] == told


def test_health_tells_a_jobs_errors_only_to_who_may_see_the_job(
    settings: Settings,
    store: Store,
    fake_executor: FakeExecutor,
    clock: ManualClock,
) -> None:
    """/health is open to monitors: the controller's errors stay there (they say why it
    stalls), but one about a job tells its id and message only to who may see the job."""
    recent: list[dict[str, Any]] = []
    state = {"passes": 3, "progressing": True, "recent_errors": recent}
    app = create_app(settings, store=store, executor=fake_executor, clock=clock,
                     controller_health=lambda: state)  # fmt: skip
    with serve(app) as url:
        alice = Client(url, token=user_token(app, "alice"))
        job = alice.submit({"command": "python t.py"}).id
        recent.append({"time": 1.0, "job": job, "error": "OSError: /home/alice/secret-run/x"})
        recent.append({"time": 2.0, "job": None, "error": "OperationalError: database is locked"})

        def errors(token: str | None) -> list[dict[str, Any]]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            answer = httpx.get(f"{url}/api/v1/health", headers=headers, timeout=30)
            assert answer.status_code == 200
            return list(answer.json()["controller"]["recent_errors"])

        hidden = [
            {"time": 1.0, "job": None, "error": "OSError"},
            {"time": 2.0, "job": None, "error": "OperationalError: database is locked"},
        ]
        assert errors(None) == hidden
        assert errors(user_token(app, "bob")) == hidden
        assert errors(user_token(app, "alice")) == recent
        assert errors(user_token(app, "ada")) == recent
