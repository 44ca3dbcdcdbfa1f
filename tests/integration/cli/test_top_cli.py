"""`gpuyard top --once` against the real API (SQLite): one frame with the nodes and the busiest
jobs the user may view, figures not measured shown as "-"."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app as cli_app
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.usage import NodeUsage
from gpuyard.models.worker import NodeInfo
from gpuyard.testing.auth import AsUser, TokenFor

GiB = 1 << 30


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gpuyard.db'}"


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor(
        [NodeInfo(f"n{i}", f"10.0.0.{i}", gpus=8, cpus=32, memory=64 * GiB) for i in range(2)]
    )


def top(api_url: str, token: str, *args: str) -> str:
    env = {"GPUYARD_URL": api_url, "GPUYARD_TOKEN": token, "COLUMNS": "160"}
    result = CliRunner().invoke(cli_app, ["top", "--once", *args], env=env)
    assert result.exit_code == 0, (result.output, result.exception)
    return str(result.stdout)


def test_one_frame_of_nodes_and_the_busiest_jobs(
    api_url: str,
    as_user: AsUser,
    token_for: TokenFor,
    controller: Controller,
    fake_executor: FakeExecutor,
    clock: ManualClock,
) -> None:
    alice = as_user("alice")
    light = alice.submit({"command": "python eval.py", "name": "eval", "resources": {"gpus": 2}})
    heavy = alice.submit({"command": "python train.py", "name": "train", "resources": {"gpus": 8}})
    controller.tick()
    controller.tick()
    on = {j.id: alice.job(j.id).placement[0].node for j in (light, heavy)}
    assert on[light.id] != on[heavy.id]  # best fit: the small one on a node of its own
    as_user("ada", admin=True).cordon(on[heavy.id], "bad fan")
    for i in range(2):
        # The light job's node is measured whole; the heavy one's counts its workers.
        fake_executor.use_node(
            on[light.id], NodeUsage(cpu_seconds=i * 45.0, memory=12 * GiB, gpu_util=88.0)
        )
        fake_executor.use(light.id, cpu_seconds=i * 5.0, memory=GiB)
        fake_executor.use(heavy.id, cpu_seconds=i * 40.0, memory=8 * GiB, gpu_util=93.0)
        controller.sampler.sample_once()
        clock.advance(10)

    lines = [line.strip() for line in top(api_url, token_for("alice")).splitlines()]
    assert lines[0].startswith("gpuyard top") and "GPUs 10/16 allocated" in lines[0]
    # One frame (--once) has no key to quit and is not redrawn.
    assert lines[0].endswith("(usage sampled every 10s)")
    nodes = {line.split()[0]: line.split()[1:] for line in lines if line[:1] == "n"}
    # NODE STATE GPUS GPU% GPU-MEM CPU MEMORY JOBS; a figure not measured is "-".
    assert nodes[on[light.id]] == ["ready", "2/8", "88%", "-", "4.5/32", "12Gi/64Gi", "1"]
    assert nodes[on[heavy.id]] == [
        *("cordoned", "(bad", "fan)", "8/8", "-", "-", "4.0/32", "8Gi/64Gi", "1")
    ]
    jobs = [line.split() for line in lines if line[:1].isdigit()]
    assert jobs == [  # busiest first
        [str(heavy.id), "alice", "train", on[heavy.id], "8", "4.00", "8Gi", "93%", "-"],
        [str(light.id), "alice", "eval", on[light.id], "2", "0.50", "1Gi", "-", "-"],
    ]
    assert "no running jobs you may view" in top(api_url, token_for("bob", group="other"))
    one = top(api_url, token_for("alice"), "--jobs", "1").splitlines()
    assert len([line for line in one if line.strip()[:1].isdigit()]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("leave", ["q", "ctrl-c"])
def test_the_live_view_leaves_cleanly_on_q_or_ctrl_c(
    api_url: str, token_for: TokenFor, controller: Controller, leave: str
) -> None:
    """In a real terminal (a pty): frames are drawn until ``q`` or Ctrl-C, then it exits 0
    and gives the terminal back as it found it."""
    import os
    import pty
    import select
    import signal
    import subprocess
    import sys
    import termios
    import time

    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    env = {
        **os.environ,
        "GPUYARD_URL": api_url,
        "GPUYARD_TOKEN": token_for("alice"),
        "TERM": "xterm",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuyard", "top", "--interval", "0.5"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while b"gpuyard top" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536)
        assert b"gpuyard top" in seen, seen
        if leave == "q":
            os.write(master, b"q")
        else:
            proc.send_signal(signal.SIGINT)
        # Keep reading: a child blocked writing a frame to a full terminal cannot leave.
        stop = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < stop:
            if select.select([master], [], [], 0.2)[0]:
                os.read(master, 65536)
        code = proc.wait(timeout=1)
        after = termios.tcgetattr(slave)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
        os.close(slave)
    assert code == 0
    assert after == before  # cbreak undone


def test_a_live_frame_says_how_often_it_is_redrawn_and_how_to_quit() -> None:
    from datetime import UTC, datetime

    from rich.console import Console

    from gpuyard.cli.top import render
    from gpuyard.models.usage import PoolUsage

    frame = render([], PoolUsage(interval=10, nodes=[], jobs=[]), at=datetime.now(UTC), redraw=2)
    console = Console(width=200, record=True)
    console.print(frame)
    header = console.export_text().splitlines()[0]
    assert header.endswith("(usage sampled every 10s, redrawn every 2s; q to quit)")
