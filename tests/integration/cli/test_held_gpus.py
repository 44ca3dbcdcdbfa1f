"""A multi-node job holds whole nodes (issue 29, point 3): `gpuyard ls`, `show`, `top`, the
API and the web's job list and page show what it asked for and what it holds, from the
placement the controller stored. Real API over HTTP (SQLite), a fake executor of two 4-GPU
nodes, the commands in-process."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app as cli_app
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo
from gpuyard.testing.auth import AsUser, TokenFor

GiB = 1 << 30


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gpuyard.db'}"


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor(
        [NodeInfo(f"n{i}", f"10.0.0.{i}", gpus=4, cpus=16, memory=64 * GiB) for i in range(2)]
    )


def gpuyard(api_url: str, token: str, *args: str) -> str:
    env = {"GPUYARD_URL": api_url, "GPUYARD_TOKEN": token, "COLUMNS": "200"}
    result = CliRunner().invoke(cli_app, list(args), env=env)
    assert result.exit_code == 0, (result.output, result.exception)
    return str(result.stdout)


def row_of(listing: str, job_id: int) -> str:
    return next(line for line in listing.splitlines() if line.split()[:1] == [str(job_id)])


def test_a_whole_node_job_shows_the_gpus_it_holds(
    api_url: str, as_user: AsUser, token_for: TokenFor, controller: Controller
) -> None:
    alice = as_user("alice")
    gang = alice.submit({"command": "python train.py", "nodes": 2, "resources": {"gpus": 1}})
    controller.tick()
    controller.tick()
    job = alice.job(gang.id)
    assert job.status.value == "running"
    assert job.held_gpus == 8  # both nodes whole, though it asked for 1 GPU on each
    assert [(s.exclusive, s.held_gpus, len(s.gpus)) for s in job.placement] == [(True, 4, 1)] * 2
    single = alice.submit({"command": "python eval.py", "resources": {"gpus": 1}})
    assert alice.job(single.id).held_gpus is None  # queued: holds nothing (the nodes are full)

    token = token_for("alice")
    listing = gpuyard(api_url, token, "ls")
    assert re.search(r"\b2 \(8 held\)", row_of(listing, gang.id)), listing
    assert "held" not in row_of(listing, single.id)
    shown = gpuyard(api_url, token, "show", str(gang.id))
    assert re.search(r"GPUs held\s+8 \(whole nodes: 2 x 4\)", shown), shown
    assert "(whole node)" in shown  # each worker's row
    frame = gpuyard(api_url, token, "top", "--once")
    assert re.search(rf"^\s*{gang.id}\b.*\b2 \(8 held\)", frame, re.M), frame

    with httpx.Client(base_url=api_url, timeout=10) as web:
        assert web.post("/login", data={"token": token, "next": "/jobs"}).status_code == 303
        assert "2×1 GPU (8 held)" in web.get("/jobs").text
        page = web.get(f"/jobs/{gang.id}").text
        assert re.search(r'id="gpus-held">8 \(whole nodes\)', page), page


def test_shared_and_exclusive_choose_what_a_job_holds(
    api_url: str, as_user: AsUser, token_for: TokenFor, controller: Controller
) -> None:
    alice = as_user("alice")
    token = token_for("alice")
    submitted = gpuyard(
        api_url, token, "submit", "--json", "--shared", "--nodes", "2", "--gpus", "1",
        "--workdir", "/tmp", "--", "python", "train.py",
    )  # fmt: skip
    shared = int(json.loads(submitted)["id"])
    whole = alice.submit({"command": "python eval.py", "exclusive": True, "resources": {"gpus": 1}})
    beside = alice.submit({"command": "python x.py", "resources": {"gpus": 2}})
    controller.tick()
    controller.tick()
    job = alice.job(shared)
    assert job.spec is not None and job.spec.exclusive is False
    assert job.status.value == "running" and job.held_gpus == 2  # only what it asked for
    assert not any(s.exclusive for s in job.placement)
    one = alice.job(whole.id)
    assert one.status.value == "running" and one.held_gpus == 4  # --exclusive on one node
    # The rest of the shared job's node(s) is left for others.
    assert alice.job(beside.id).status.value == "running"
    held_by = {s.node for s in one.placement}
    assert held_by.isdisjoint(s.node for s in job.placement + alice.job(beside.id).placement)
    listing = gpuyard(api_url, token, "ls")
    assert "held" not in row_of(listing, shared)
    assert re.search(r"\b1 \(4 held\)", row_of(listing, whole.id)), listing
