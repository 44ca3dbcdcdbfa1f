"""`gpuyard nodes rm` forgets gone nodes (issue 29, point 9): an admin only, a gone node only,
and not while a job that has not ended holds it; each refusal says why. The app is served over
HTTP (DELETE /api/v1/nodes/NAME); the CLI runs in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app as cli_app
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict, NotFound, PermissionDenied
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models import JobState, NodeState
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.store.tables import NodeRow
from gpuyard.testing.auth import AsUser, TokenFor


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", user="root", admins=["ada"])


def gone(store: Store, name: str) -> None:
    """What the controller writes when no executor presents the node any more."""
    with store.write() as session:
        row = session.get(NodeRow, name)
        assert row is not None
        row.state = NodeState.GONE


def node_names(store: Store) -> set[str]:
    with store.read() as session:
        return {row.name for row in session.query(NodeRow)}


def nodes_rm(api_url: str, token: str, *names: str) -> tuple[int, str, str]:
    env = {"GPUYARD_URL": api_url, "GPUYARD_TOKEN": token, "COLUMNS": "300"}
    result = CliRunner().invoke(cli_app, ["nodes", "rm", *names], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_only_a_gone_node_that_no_job_holds_is_removed(
    api_url: str,
    as_user: AsUser,
    token_for: TokenFor,
    store: Store,
    fake_executor: FakeExecutor,
    clock: ManualClock,
) -> None:
    controller = Controller(store, fake_executor, clock=clock)
    controller.register_nodes()
    ada, alice = as_user("ada", admin=True), as_user("alice")
    job = alice.submit({"command": "python t.py", "resources": {"gpus": 2}}).id
    controller.tick()
    assert alice.job(job).state is JobState.RUNNING

    with pytest.raises(Conflict, match="is ready, not gone"):
        ada.remove_node("fake0")
    gone(store, "fake0")
    with pytest.raises(PermissionDenied):
        alice.remove_node("fake0")
    with pytest.raises(Conflict, match=f"held by job {job}, which has not ended"):
        ada.remove_node("fake0")
    with pytest.raises(NotFound):
        ada.remove_node("nosuch")

    fake_executor.exit(job, code=0)
    controller.tick()
    controller.tick()
    assert alice.job(job).state.is_terminal()
    # Several at once: each refused one says why, the others are removed all the same.
    code, out, err = nodes_rm(api_url, token_for("ada", admin=True), "nosuch", "fake0")
    assert code == 1
    assert "node fake0 removed" in out and "node nosuch does not exist" in err
    assert "fake0" not in node_names(store)
    assert any(e.action == "node.rm" and e.target == "node:fake0" for e in ada.audit())
