"""The shell's WebSocket (`gpuyard exec JOB shell`) over real HTTP, on both databases, with the
fake executor: its terminal is a real pseudo-terminal whose worker side the test plays. The
relay both ways, resizes, the exit code, what ends a session, and every refusal."""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import time
from typing import Any

import pytest

from gpuyard.client import (
    Client,
    Conflict,
    InvalidSpec,
    NotFound,
    PermissionDenied,
    ServerUnavailable,
    Unauthenticated,
)
from gpuyard.client.shell import ShellConnection, ShellEnded
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.launch.exec_workers import SHELL_ARGV
from gpuyard.models.worker import NodeInfo, WorkerKey, WorkerLaunch
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow
from gpuyard.testing.auth import TokenFor, user_token
from gpuyard.testing.server import serve

SHELL = 200_000


def plan(job: JobRow, rank: int, node: str) -> WorkerLaunch:
    return WorkerLaunch(
        key=WorkerKey(job.id, job.attempt, rank),
        node=node,
        argv=list(SHELL_ARGV),
        env={},
        cwd="/",
        grace=1.0,
        role="shell",
        primary=False,
    )


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor([NodeInfo("n0", "127.0.0.10", gpus=0, cpus=64, memory=1 << 40)])


@pytest.fixture
def app(settings: Settings, store: Store, fake_executor: FakeExecutor, clock: ManualClock) -> Any:
    return create_app(settings, store=store, executor=fake_executor, clock=clock, plan_shell=plan)


@pytest.fixture
def olga(api_url: str, token_for: TokenFor) -> Client:
    return Client(api_url, token=token_for("olga", group="lab"))


def held_job(olga: Client, controller: Controller, **spec: Any) -> int:
    job_id = olga.submit({"command": "sleep 1", **spec}).id
    controller.tick()
    olga.exec_stop(job_id)
    controller.tick()
    controller.tick()
    assert olga.job(job_id).state.value == "held"
    return job_id


def slave_of(executor: FakeExecutor, job_id: int, rank: int = SHELL) -> int:
    fd = executor.workers[WorkerKey(job_id, 0, rank)].terminal
    assert fd is not None
    return fd


def read_until(conn: ShellConnection, text: bytes, timeout: float = 10) -> bytes:
    out, deadline = b"", time.monotonic() + timeout
    while text not in out:
        out += conn.recv(timeout=max(0.05, deadline - time.monotonic()))
    return out


def test_the_relay_carries_the_terminal_both_ways_and_ends_with_its_exit_code(
    olga: Client, controller: Controller, fake_executor: FakeExecutor
) -> None:
    job_id = held_job(olga, controller)
    with olga.open_shell(job_id, rows=30, cols=90) as conn:
        assert (conn.rank, conn.node) == (SHELL, "n0")
        slave = slave_of(fake_executor, job_id)
        size = struct.unpack("HHHH", fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8))
        assert size[:2] == (30, 90)
        os.write(slave, b"prompt$ ")
        assert read_until(conn, b"prompt$ ") == b"prompt$ "
        conn.send(b"echo hi\n")  # the line discipline echoes it and hands the line over
        assert b"echo hi" in read_until(conn, b"echo hi")
        assert os.read(slave, 100) == b"echo hi\n"
        conn.resize(50, 120)
        deadline = time.monotonic() + 5
        while struct.unpack("HHHH", fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8))[:2] != (
            50,
            120,
        ):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.write(slave, b"x" * 300_000)  # more than one message: read as it is taken
        got = read_until(conn, b"x" * 300_000)
        assert got.count(b"x") == 300_000
        # The shell exits: its exit is recorded, then its terminal closes.
        fake_executor.exit(job_id, rank=SHELL, code=4)
        os.close(slave)
        with pytest.raises(ShellEnded) as ended:
            conn.recv(timeout=10)
        assert ended.value.code == 4
    assert not fake_executor.workers[WorkerKey(job_id, 0, SHELL)].killed
    controller.tick()
    status = olga.exec_status(job_id)
    assert [(w.rank, w.role, w.state, w.exit_code) for w in status.workers] == [
        (0, "worker", "exited", 143),
        (SHELL, "shell", "exited", 4),
    ]
    entries = olga.faults(job_id)
    assert [(e.kind, e.cause, e.actor) for e in entries] == [
        ("usercall", "exec stop", "user:olga"),
        ("usercall", "exec shell --worker 0", "user:olga"),
    ]
    assert entries[1].outcome == "worker 200000 on n0 exited with code 4"


def test_leaving_or_speaking_nonsense_kills_the_shell(
    olga: Client, controller: Controller, fake_executor: FakeExecutor
) -> None:
    job_id = held_job(olga, controller)
    conn = olga.open_shell(job_id)
    conn.close()
    deadline = time.monotonic() + 10
    while not fake_executor.workers[WorkerKey(job_id, 0, SHELL)].killed:
        assert time.monotonic() < deadline, "the shell outlived its connection"
        time.sleep(0.02)
    os.close(slave_of(fake_executor, job_id))
    controller.tick()

    for nonsense, words in [
        ("not json", "must be"),
        ('{"resize": {"rows": 0, "cols": 80}}', "1 to 1000 rows and columns"),
        ('{"resize": {"rows": 24.5, "cols": 80}}', "must be"),
        ('{"resize": {"rows": 24, "cols": 80}, "run": "x"}', "must be"),
        ("x" * 5000, "at most 1024"),
    ]:
        conn = olga.open_shell(job_id)
        rank = conn.rank
        conn._socket.send(nonsense)
        with pytest.raises(InvalidSpec, match=words):
            conn.recv(timeout=10)
        conn.close()
        deadline = time.monotonic() + 10
        while not fake_executor.workers[WorkerKey(job_id, 0, rank)].killed:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.close(slave_of(fake_executor, job_id, rank))
        controller.tick()
    conn = olga.open_shell(job_id)
    conn._socket.send(b"y" * (64 * 1024 + 1))
    with pytest.raises(InvalidSpec, match="at most 65536"):
        conn.recv(timeout=10)
    conn.close()


def test_who_may_not_exec_into_a_job_gets_no_shell(
    api_url: str, olga: Client, token_for: TokenFor, controller: Controller
) -> None:
    job_id = held_job(olga, controller, access="read-only")
    reader = Client(api_url, token=token_for("rita", group="lab"))
    with pytest.raises(PermissionDenied, match="read-only"):
        reader.open_shell(job_id)
    # Read-write access lets a member stop the job, never be its owner in a shell.
    writer_job = held_job(olga, controller, access="read-write")
    writer = Client(api_url, token=token_for("wanda", group="lab"))
    with pytest.raises(PermissionDenied, match="only its owner may"):
        writer.open_shell(writer_job)
    admin = Client(api_url, token=token_for("ada", admin=True))
    with pytest.raises(PermissionDenied, match="GPUYARD_ADMIN_EXEC"):
        admin.open_shell(writer_job)
    assert [e.cause for e in olga.faults(writer_job)] == ["exec stop"]
    outsider = Client(api_url, token=token_for("otto", group="elsewhere"))
    with pytest.raises(NotFound, match=f"job {job_id} does not exist"):
        outsider.open_shell(job_id)
    with pytest.raises(Unauthenticated, match="unknown or was revoked"):
        Client(api_url, token="gy_nope").open_shell(job_id)
    with pytest.raises(Unauthenticated, match="sign in first"):
        Client(api_url).open_shell(job_id)  # no token at all
    with pytest.raises(NotFound, match="has no worker 9"):
        olga.open_shell(job_id, worker=9)
    with pytest.raises(InvalidSpec, match="1 to 1000 rows"):
        olga.open_shell(job_id, cols=5000)
    running = olga.submit({"command": "sleep 1"}).id
    controller.tick()
    with pytest.raises(Conflict, match="is not held, so you cannot open a shell in it"):
        olga.open_shell(running)
    with olga.open_shell(job_id), pytest.raises(Conflict, match="one run at a time"):
        olga.open_shell(job_id)  # a shell is a run: one at a time
    assert [e.cause for e in olga.faults(job_id)] == ["exec stop", "exec shell --worker 0"]


def test_a_server_without_the_pools_workers_opens_no_shell(
    settings: Settings, store: Store, clock: ManualClock
) -> None:
    plain = create_app(settings, store=store, clock=clock)  # no executor, no planner
    token = user_token(plain, "olga")
    with serve(plain) as url, pytest.raises(ServerUnavailable, match="cannot open a shell"):
        Client(url, token=token).open_shell(1)


def test_revoking_the_token_a_shell_was_opened_with_ends_the_shell(
    api_url: str, olga: Client, controller: Controller, fake_executor: FakeExecutor
) -> None:
    """Issue 24, point 9: an open shell is no way around a revoked token."""
    job_id = held_job(olga, controller)
    made = olga.create_token(label="shell")
    holder = Client(api_url, token=made.token)
    conn = holder.open_shell(job_id)
    olga.revoke_token(made.id)
    with pytest.raises(Unauthenticated, match="revoked or has expired"):
        read_until(conn, b"never printed", timeout=60)
    conn.close()
    deadline = time.monotonic() + 60
    while not fake_executor.workers[WorkerKey(job_id, 0, SHELL)].killed:
        assert time.monotonic() < deadline, "the shell outlived its revoked token"
        time.sleep(0.05)
    os.close(slave_of(fake_executor, job_id))
