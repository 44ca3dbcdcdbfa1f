"""`gpuyard nodes` counts the jobs the caller may not see instead of naming them (issue 24,
point 10). The app is served over HTTP; the CLI runs in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app as cli_app
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.auth import AsUser, TokenFor


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", user="root", admins=["ada"])


def nodes_as(api_url: str, token: str) -> str:
    env = {"GPUYARD_URL": api_url, "GPUYARD_TOKEN": token, "COLUMNS": "300"}
    result = CliRunner().invoke(cli_app, ["nodes"], env=env)
    assert result.exit_code == 0, (result.output, result.exception)
    return str(result.stdout)


def test_nodes_count_others_jobs(
    api_url: str,
    as_user: AsUser,
    token_for: TokenFor,
    store: Store,
    fake_executor: FakeExecutor,
    clock: ManualClock,
) -> None:
    controller = Controller(store, fake_executor, clock=clock)
    controller.register_nodes()
    job = as_user("alice").submit({"command": "python t.py", "resources": {"gpus": 2}}).id
    controller.tick()
    [row] = [line for line in nodes_as(api_url, token_for("bob")).splitlines() if "fake0" in line]
    assert "+1 other" in row and f" {job} " not in f" {row} "
    [row] = [line for line in nodes_as(api_url, token_for("alice")).splitlines() if "fake0" in line]
    assert "other" not in row and f" {job} " in f" {row} "
