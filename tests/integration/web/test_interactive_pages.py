"""Interactive jobs in the web UI over HTTP, on both databases, with the fake executor (its
node is 127.0.0.1, so a service job's slot is a port of this machine, where a test starts a
stand-in service): the job page's "Create development environment" and "Create TensorBoard"
for whoever the matrix allows, the jobs they make, their refusals; "Open" and the service's
state for the owner alone; the owner's environments on the job list."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from gpuyard.client import Client
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo
from gpuyard.testing.auth import TokenFor

DEV = 'id="dev-environment-job"'
BOARD = 'id="tensorboard-job"'
OPEN = 'id="open-service"'


@pytest.fixture
def fake_executor() -> FakeExecutor:
    """Three nodes of 4 GPUs on this machine: a two-node job (whole nodes) and a notebook
    fit together."""
    return FakeExecutor(
        [NodeInfo(f"n{i}", "127.0.0.1", gpus=4, cpus=16, memory=64 << 30) for i in range(3)]
    )


@pytest.fixture
def web(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=10, follow_redirects=False) as client:
        yield client


def signed_in(web: httpx.Client, token: str) -> str:
    """Sign ``web`` in with ``token``; the CSRF token its forms carry."""
    assert web.post("/login", data={"token": token, "next": "/jobs"}).status_code == 303
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', web.get("/jobs/new").text)
    assert found is not None
    return found.group(1)


def made(answer: httpx.Response) -> int:
    """The id of the job a POST made: it redirects to the new job's page."""
    assert answer.status_code == 303, answer.text
    found = re.match(r"/jobs/(\d+)\?notice=", answer.headers["location"])
    assert found is not None, answer.headers["location"]
    return int(found.group(1))


@pytest.fixture
def training(as_user: Any) -> tuple[Client, int]:
    """Alice (group lab) and a two-node training job of hers that her group may read."""
    alice = as_user("alice", group="lab")
    job = alice.submit(
        {
            "name": "resnet",
            "command": "python train.py --lr 3e-4",
            "mode": "pytorch",
            "nodes": 2,
            "resources": {"gpus": 2, "cpus": 4, "memory": "8G"},
            "env": {"SECRET": "alice's"},
            "workdir": "/srv/code",
            "mounts": {"datasets": [{"name": "imagenet", "path": "/data/imagenet"}]},
            "access": "read-only",
            "max_runtime": "2h",
        }
    ).id
    return alice, job


def test_the_buttons_follow_the_viewers_rights(
    web: httpx.Client, token_for: TokenFor, training: tuple[Client, int], as_user: Any
) -> None:
    alice, job = training
    private = alice.submit({"command": "python x.py", "access": "none"}).id
    signed_in(web, token_for("alice", group="lab"))
    page = web.get(f"/jobs/{job}").text
    assert DEV in page and BOARD in page
    assert f'action="/jobs/{job}/dev-environment"' in page
    assert f'action="/jobs/{job}/tensorboard"' in page
    assert OPEN not in page  # a training job serves nothing
    # A read-only member of her group may read it, so may make both of her own.
    bob = as_user("bob", group="lab")
    allowed = {a.value for a in bob.job(job).allowed}
    assert {"dev-environment", "tensorboard"} <= allowed and "stop" not in allowed
    signed_in(web, token_for("bob", group="lab"))
    page = web.get(f"/jobs/{job}").text
    assert DEV in page and BOARD in page and 'id="stop-job"' not in page
    # Her private job is not his to see: no page, so no button.
    assert web.get(f"/jobs/{private}").status_code == 404
    signed_in(web, token_for("carol"))
    assert web.get(f"/jobs/{job}").status_code == 404


def test_a_development_environment_is_the_job_made_a_notebook(
    web: httpx.Client, token_for: TokenFor, training: tuple[Client, int], as_user: Any
) -> None:
    alice, job = training
    csrf = signed_in(web, token_for("alice", group="lab"))
    before = alice.jobs(owner="alice").total
    assert web.post(f"/jobs/{job}/dev-environment", data={}).status_code == 403  # no CSRF
    evil = {"Origin": "https://evil.example"}
    refused = web.post(f"/jobs/{job}/dev-environment", data={"csrf": csrf}, headers=evil)
    assert refused.status_code == 403
    assert alice.jobs(owner="alice").total == before
    env = alice.job(made(web.post(f"/jobs/{job}/dev-environment", data={"csrf": csrf})))
    assert (env.owner, env.name) == ("alice", f"notebook-of-{job}")
    spec, source = env.spec, alice.job(job).spec
    assert spec is not None and source is not None and spec.service is not None
    assert (spec.service.kind.value, spec.service.jobs) == ("notebook", [])
    # One node of the job's size, the service's own command, the job's environment.
    assert (spec.mode.value, spec.nodes) == ("single", 1)
    assert spec.command is not None and spec.command.startswith("jupyter lab ")
    assert spec.resources == source.resources and spec.mounts.datasets == source.mounts.datasets
    assert (spec.workdir, spec.access.value, spec.max_runtime) == ("/srv/code", "read-only", 7200)
    assert spec.env["SECRET"] == "alice's"
    # Another's development environment is his own, without her environment's values.
    csrf = signed_in(web, token_for("bob", group="lab"))
    his = as_user("bob", group="lab").job(
        made(web.post(f"/jobs/{job}/dev-environment", data={"csrf": csrf}))
    )
    assert his.owner == "bob" and his.spec is not None and "SECRET" not in his.spec.env


def test_a_tensorboard_mounts_the_jobs_outputs(
    web: httpx.Client, token_for: TokenFor, training: tuple[Client, int], as_user: Any
) -> None:
    alice, job = training
    csrf = signed_in(web, token_for("bob", group="lab"))
    bob = as_user("bob", group="lab")
    assert web.post(f"/jobs/{job}/tensorboard", data={"csrf": "forged"}).status_code == 403
    board = bob.job(made(web.post(f"/jobs/{job}/tensorboard", data={"csrf": csrf})))
    assert (board.owner, board.name) == ("bob", f"tensorboard-{job}")
    spec = board.spec
    assert spec is not None and spec.service is not None
    assert (spec.service.kind.value, spec.service.jobs) == ("tensorboard", [job])
    [mount] = [m for m in spec.mounts.models if m.name == f"job-{job}"]
    assert mount.path.endswith("outputs")
    # His board's page: what it shows, and he may open it.
    page = web.get(f"/jobs/{board.id}").text
    assert f'<a href="/jobs/{job}">job {job}</a>' in page and OPEN in page
    # Carol may not see the job: the page's answer for a missing job, and nothing is made.
    theirs = signed_in(web, token_for("carol"))
    refused = web.post(f"/jobs/{job}/tensorboard", data={"csrf": theirs})
    assert refused.status_code == 404
    refused = web.post(f"/jobs/{job}/dev-environment", data={"csrf": theirs})
    assert refused.status_code == 404
    assert web.get("/jobs").text.count("tensorboard-") == 0
    private = alice.submit({"command": "python x.py", "access": "none"}).id
    mine = signed_in(web, token_for("bob", group="lab"))
    assert web.post(f"/jobs/{private}/tensorboard", data={"csrf": mine}).status_code == 404
    assert [j.name for j in bob.jobs(owner="bob").items] == [f"tensorboard-{job}"]


class _Answers(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(port: int) -> Iterator[None]:
    """A stand-in service on 127.0.0.1:``port`` (the job's slot) while in the block."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _running(client: Client, controller: Controller, job_id: int) -> int:
    """Tick until job ``job_id`` runs; its slot's port."""
    for _ in range(5):
        controller.tick()
        job = client.job(job_id)
        if job.state.value == "running":
            return job.placement[0].port
    raise AssertionError(f"job {job_id} does not run: {client.job(job_id).state}")


def _state(page: str) -> str:
    found = re.search(r'id="service-state"[^>]*>([a-z]+)<', page)
    assert found is not None
    return found.group(1)


def test_only_the_owner_is_offered_open_with_the_services_state(
    web: httpx.Client,
    token_for: TokenFor,
    training: tuple[Client, int],
    as_user: Any,
    controller: Controller,
) -> None:
    alice, job = training
    csrf = signed_in(web, token_for("alice", group="lab"))
    notebook = made(web.post(f"/jobs/{job}/dev-environment", data={"csrf": csrf}))
    page = web.get(f"/jobs/{notebook}").text
    assert OPEN in page and _state(page) == "waiting"
    port = _running(alice, controller, notebook)
    page = web.get(f"/jobs/{notebook}").text
    assert f'href="/proxy/{notebook}/lab" target="_blank"' in page
    assert _state(page) == "starting" and "does not answer yet" in page
    with serving(port):
        page = web.get(f"/jobs/{notebook}").text
        assert _state(page) == "ready" and OPEN in page
        state = web.get(f"/jobs/{notebook}/service.json").json()
        assert (state["state"], state["path"]) == ("ready", f"/proxy/{notebook}/lab")
    # Her group may read the notebook (made from a read-only job), but not open it; nor may
    # an admin: its pages run as her.
    for name, admin in (("bob", False), ("root", True)):
        signed_in(web, token_for(name, group="lab", admin=admin))
        page = web.get(f"/jobs/{notebook}").text
        assert OPEN not in page and "/proxy/" not in page
        assert 'id="service-owner-only"' in page
    signed_in(web, token_for("carol"))
    assert web.get(f"/jobs/{notebook}").status_code == 404
    assert web.get(f"/jobs/{notebook}/service.json").status_code == 404


def test_the_job_list_shows_my_environments_until_they_end(
    web: httpx.Client,
    token_for: TokenFor,
    training: tuple[Client, int],
    controller: Controller,
) -> None:
    alice, job = training
    csrf = signed_in(web, token_for("alice", group="lab"))
    assert "My environments" not in web.get("/jobs").text
    notebook = made(web.post(f"/jobs/{job}/dev-environment", data={"csrf": csrf}))
    board = made(web.post(f"/jobs/{job}/tensorboard", data={"csrf": csrf}))
    _running(alice, controller, notebook)
    listed = web.get("/jobs").text
    section = listed.split('id="h-environments"', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'<li><a href="/jobs/(\d+)">', section) == [str(board), str(notebook)]
    # Open for those that run (the list probes nothing: the job's page says whether it is
    # ready).
    for one, path in ((notebook, "lab"), (board, "")):
        running = alice.job(one).state.value == "running"
        assert (f'href="/proxy/{one}/{path}"' in section) == running
    assert alice.job(notebook).state.value == "running"
    # Nobody else's list shows them.
    signed_in(web, token_for("bob", group="lab"))
    assert "My environments" not in web.get("/jobs").text
    signed_in(web, token_for("alice", group="lab"))
    alice.stop(notebook)
    alice.stop(board)
    for _ in range(3):
        controller.tick()
    assert "My environments" not in web.get("/jobs").text
