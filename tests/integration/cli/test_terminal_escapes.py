"""What the CLI and the Slurm commands print of another user's text reaches the terminal
without escape sequences (issue 24, point 11): `gpuyard show`, `ls`, `logs` (unless
`--raw`), `scontrol show job`, `squeue`. The app is served over HTTP; the commands run
in-process, signed in as an admin who views alice's job."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app as cli_app
from gpuyard.client import Client
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.settings import Settings
from gpuyard.slurm import commands
from gpuyard.testing.auth import AsUser, TokenFor

TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H"
CLIPBOARD = "\x1b]52;c;ZXZpbA==\x1b\\"
HOSTILE = {
    "command": f"echo '{TITLE}{CLEAR}' hello",
    "env": {"PROMPT": f"{CLIPBOARD}\x9b31mred"},
    "resources": {"gpus": 1},
}


def shows_no_escape(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, repr(text)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", user="root", admins=["ada"])


@pytest.fixture
def hostile_job(as_user: AsUser, controller: Controller, fake_executor: FakeExecutor) -> int:
    alice: Client = as_user("alice")
    job = alice.submit(HOSTILE).id
    controller.tick()
    controller.tick()
    fake_executor.write_log(
        job, f"epoch 1\n{TITLE}{CLEAR}\x1b]52;c;ZXZpbA==\x07loss 0.1\n".encode()
    )
    return job


def gpuyard(api_url: str, token: str, *args: str) -> bytes:
    env = {"GPUYARD_URL": api_url, "GPUYARD_TOKEN": token, "COLUMNS": "300"}
    result = CliRunner().invoke(cli_app, list(args), env=env)
    assert result.exit_code == 0, (result.output, result.exception)
    return bytes(result.stdout_bytes)


def test_show_ls_and_logs_print_no_escape_of_the_jobs_owner(
    api_url: str, token_for: TokenFor, hostile_job: int
) -> None:
    token = token_for("ada", admin=True)
    shown = gpuyard(api_url, token, "show", str(hostile_job)).decode()
    shows_no_escape(shown)
    assert "hello" in shown and "PROMPT=red" in shown
    shows_no_escape(gpuyard(api_url, token, "ls").decode())
    log = gpuyard(api_url, token, "logs", str(hostile_job)).decode()
    assert log == "epoch 1\nloss 0.1\n"
    # --raw is the log as written, for a file: the one way to get its bytes back.
    raw = gpuyard(api_url, token, "logs", "--raw", str(hostile_job))
    assert TITLE.encode() in raw


def test_scontrol_and_squeue_print_no_escape_of_the_jobs_owner(
    api_url: str,
    token_for: TokenFor,
    hostile_job: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GPUYARD_URL", api_url)
    monkeypatch.setenv("GPUYARD_TOKEN", token_for("ada", admin=True))
    assert commands.main(["scontrol", "show", "job", str(hostile_job)]) == 0
    shown = capsys.readouterr().out
    shows_no_escape(shown)
    assert "Command=echo" in shown and "hello" in shown
    assert commands.main(["squeue", "-o", "%i %o", "-j", str(hostile_job)]) == 0
    listed = capsys.readouterr().out
    shows_no_escape(listed)
    assert str(hostile_job) in listed
