"""rexec, MPI's remote-launch agent: the protocol between ``agent`` and ``serve``, for real.

Each test runs ``rexec.py`` as mpirun does: ``serve`` as a worker's process, ``agent`` as the
"ssh" that mpirun calls (``AGENT [ssh options] HOST WORDS...``), over TCP on loopback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from gpuyard.injob import channel, rexec

REXEC = Path(rexec.__file__).resolve()
TOKEN = "job-secret"


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(tmp_path: Path, *, port: int = 0, **env: str) -> Server:
    log = tmp_path / f"serve-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(REXEC), "serve"],
            env={
                "PATH": os.environ["PATH"],
                "GPUYARD_REXEC_ADDRESS": "127.0.0.1",
                "GPUYARD_REXEC_PORT": str(port),
                "GPUYARD_JOB_TOKEN": TOKEN,
                **env,
            },
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text())
        if found:
            return Server(proc, int(found.group(1)), log)
        assert proc.poll() is None, log.read_text()
        time.sleep(0.02)
    raise AssertionError(f"rexec serve did not start: {log.read_text()}")


def stop(server: Server) -> int:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    return server.proc.wait(15)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    server = start_server(tmp_path)
    yield server
    stop(server)


def hosts_file(tmp_path: Path, **hosts: int) -> Path:
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({n: {"address": "127.0.0.1", "port": p} for n, p in hosts.items()}))
    return path


def agent(
    tmp_path: Path,
    *args: str,
    hosts: dict[str, int],
    input: bytes = b"",
    timeout: float = 30,
    **env: str,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-I", "-S", str(REXEC), "agent", *args],
        env=agent_env(tmp_path, hosts, **env),
        input=input,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def agent_env(tmp_path: Path, hosts: dict[str, int], **env: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "GPUYARD_REXEC_HOSTS": str(hosts_file(tmp_path, **hosts)),
        "GPUYARD_REXEC_SELF": "node0",
        "GPUYARD_JOB_TOKEN": TOKEN,
        **env,
    }


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(condition: object, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


# -- running a command -----------------------------------------------------------------------


def test_runs_the_command_and_relays_stdout_stderr_and_exit_status(
    tmp_path: Path, server: Server
) -> None:
    done = agent(
        tmp_path, "node1", "echo out;", "echo err >&2;", "exit 7", hosts={"node1": server.port}
    )
    assert (done.returncode, done.stdout, done.stderr) == (7, b"out\n", b"err\n")


def test_relays_stdin_and_large_outputs(tmp_path: Path, server: Server) -> None:
    data = os.urandom(300_000)  # several frames each way
    done = agent(tmp_path, "node1", "cat", hosts={"node1": server.port}, input=data)
    assert (done.returncode, done.stdout) == (0, data)


def test_a_command_killed_by_a_signal_ends_with_128_plus_its_number(
    tmp_path: Path, server: Server
) -> None:
    done = agent(tmp_path, "node1", "kill -TERM $$", hosts={"node1": server.port})
    assert done.returncode == 128 + signal.SIGTERM


def test_takes_ssh_options_as_mpirun_and_hydra_pass_them(tmp_path: Path, server: Server) -> None:
    # Hydra's ssh launcher passes -x; users configure agents like "ssh -q -o Key=value".
    done = agent(
        tmp_path,
        "-x",
        "-q",
        "-o",
        "StrictHostKeyChecking=no",
        "-p22",
        "node1",
        "echo",
        "hi",
        hosts={"node1": server.port},
    )
    assert (done.returncode, done.stdout) == (0, b"hi\n")


def test_the_command_runs_in_the_servers_environment_not_the_agents(
    tmp_path: Path,
) -> None:
    # The daemon must see the target worker's environment (its GPUs, its node), not mpirun's.
    server = start_server(tmp_path, GPUYARD_NODE_NAME="node1")
    try:
        done = agent(
            tmp_path,
            "node1",
            "echo $GPUYARD_NODE_NAME",
            hosts={"node1": server.port},
            GPUYARD_NODE_NAME="node0",
        )
    finally:
        stop(server)
    assert done.stdout == b"node1\n"


def test_a_command_for_this_worker_runs_here_without_a_server(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        unused = probe.getsockname()[1]
    done = agent(
        tmp_path,
        "node0",
        "echo $MARK; exit 3",
        hosts={"node0": unused, "node1": unused},
        MARK="ran-locally",
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, b"ran-locally\n", b"")
    # A tool that names the node by its address gets the same.
    by_address = agent(tmp_path, "127.0.0.1", "true", hosts={"node0": unused})
    assert by_address.returncode == 0


# -- refusals and failures ---------------------------------------------------------------------


def test_a_bad_token_is_refused_and_the_server_goes_on(tmp_path: Path, server: Server) -> None:
    marker = tmp_path / "ran"
    done = agent(
        tmp_path,
        "node1",
        f"touch {marker}",
        hosts={"node1": server.port},
        GPUYARD_JOB_TOKEN="guess",
    )
    assert done.returncode == rexec.EXIT_CONNECTION
    assert b"authentication failed" in done.stderr
    assert not marker.exists()
    assert "bad token" in server.log_text()
    good = agent(tmp_path, "node1", "echo still serving", hosts={"node1": server.port})
    assert good.stdout == b"still serving\n"


def test_a_bad_header_gets_an_error_frame(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(b'job-secret\n{"argv": "not a list"}\n')
        head = conn.recv(5, socket.MSG_WAITALL)
        assert head[0] == channel.ERROR
        message = conn.recv(int.from_bytes(head[1:], "big"), socket.MSG_WAITALL)
    assert b"argv must be a non-empty list" in message


def read_error(conn: socket.socket) -> bytes:
    """The server's ERROR frame's message (the connection must have one coming)."""
    head = conn.recv(5, socket.MSG_WAITALL)
    assert head[:1] == bytes((channel.ERROR,)), head
    return conn.recv(int.from_bytes(head[1:], "big"), socket.MSG_WAITALL)


def test_a_token_line_longer_than_256_bytes_is_refused_unread(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(b"t" * 100_000)
        assert b"token line is over 256 bytes" in read_error(conn)


def test_an_unknown_host_fails_like_ssh(tmp_path: Path) -> None:
    done = agent(tmp_path, "node9", "true", hosts={"node1": 1})
    assert done.returncode == rexec.EXIT_CONNECTION
    assert b"unknown host 'node9'" in done.stderr


def test_waits_for_a_target_that_is_not_serving_yet(tmp_path: Path) -> None:
    # The executor starts a job's workers side by side: mpirun may call before a target
    # listens. The agent retries a refused connection instead of failing the job.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = subprocess.Popen(
        [sys.executable, "-I", "-S", str(REXEC), "agent", "node1", "echo", "late"],
        env=agent_env(tmp_path, {"node1": port}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(0.5)
    server = start_server(tmp_path, port=port)
    try:
        out, err = client.communicate(timeout=30)
    finally:
        stop(server)
    assert (client.returncode, out) == (0, b"late\n"), err


# -- unauthenticated connections (issue 24, point 3) ------------------------------------------

FLOOD = r"""
import socket, sys, time

port, count, junk = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
conns, sent, opened = [None] * count, [0] * count, 0
while True:
    for i in range(count):
        conn = conns[i]
        if conn is None:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                continue
            conn.setblocking(False)
            conns[i], sent[i], opened = conn, 0, opened + 1
        try:
            # The first `junk` connections send a megabyte without a newline, the others drip.
            data = b"y" * (1_000_000 - sent[i]) if i < junk and sent[i] < 1_000_000 else b"x"
            sent[i] += conn.send(data)
        except BlockingIOError:
            pass
        except OSError:
            conn.close()
            conns[i] = None
    print(opened, flush=True)
    time.sleep(0.5)
"""


def test_a_flood_of_unauthenticated_connections_costs_no_thread_and_no_memory(
    tmp_path: Path, server: Server
) -> None:
    # Another user's process opens 200 connections that never send a token: some drip a byte
    # now and then, some send a megabyte without a newline, and each one closed is reopened.
    serving = psutil.Process(server.proc.pid)
    threads, rss = serving.num_threads(), serving.memory_info().rss
    flood = subprocess.Popen(
        [sys.executable, "-c", FLOOD, str(server.port), "200", "32"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert flood.stdout is not None
        most_threads, most_rss, opened = threads, rss, 0
        # Sample past two token deadlines (5 s each), and until 300 connections have been
        # opened (the server closed 100 of them) or a minute has passed.
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < 12 or (opened < 300 and elapsed < 60):
            opened = int(flood.stdout.readline() or 0)
            assert flood.poll() is None, "the flood stopped"
            most_threads = max(most_threads, serving.num_threads())
            most_rss = max(most_rss, serving.memory_info().rss)
        # A session of the job itself still gets in, and runs, in the middle of the flood.
        done = agent(tmp_path, "node1", "echo alive", hosts={"node1": server.port}, timeout=60)
        assert (done.returncode, done.stdout) == (0, b"alive\n"), done.stderr
    finally:
        flood.kill()
        flood.wait()
    assert most_threads == threads == 1, f"{most_threads} threads while flooded"
    assert most_rss - rss < 16 << 20, f"serve grew by {(most_rss - rss) >> 20} MiB"
    assert serving.children() == []
    log = server.log_text()
    assert "too many waiting for their token" in log, log
    assert "token line is over 256 bytes" in log, log


def test_a_byte_dripped_every_second_is_cut_at_the_deadline(server: Server) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=1) as conn:
        closed = False
        while not closed and time.monotonic() - started < 60:
            try:
                conn.sendall(b"a")  # never a newline: the token line never ends
                closed = conn.recv(1) == b""
            except TimeoutError:
                continue  # still open: drip again a second later
            except OSError:
                closed = True  # reset: as good as closed
    assert closed, "a connection that dripped a byte a second was kept for a minute"
    assert wait_until(lambda: "no token within the deadline" in server.log_text())


def test_sessions_beyond_the_cap_are_refused_and_the_running_ones_go_on(tmp_path: Path) -> None:
    server = start_server(tmp_path, GPUYARD_REXEC_MAX_SESSIONS="1")
    first = subprocess.Popen(
        [sys.executable, "-I", "-S", str(REXEC), "agent", "node1", "echo started; sleep 300"],
        env=agent_env(tmp_path, {"node1": server.port}),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline() == b"started\n"
        second = agent(tmp_path, "node1", "echo second", hosts={"node1": server.port})
        assert second.returncode == rexec.EXIT_CONNECTION
        assert b"too many sessions: 1 are running" in second.stderr
        assert first.poll() is None  # the running session was not disturbed
        first.kill()
        first.wait()

        def third_runs() -> bool:
            done = agent(tmp_path, "node1", "echo third", hosts={"node1": server.port})
            return done.stdout == b"third\n"

        assert wait_until(third_runs, timeout=60), server.log_text()
    finally:
        first.kill()
        first.wait()
        stop(server)


@pytest.mark.parametrize("address", ["0.0.0.0", "::"])  # noqa: S104 - what must be refused
def test_it_never_listens_on_every_interface(tmp_path: Path, address: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(REXEC), "serve"],
        env={
            "PATH": os.environ["PATH"],
            "GPUYARD_REXEC_ADDRESS": address,
            "GPUYARD_REXEC_PORT": "0",
            "GPUYARD_JOB_TOKEN": TOKEN,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"rexec serve is serving on {address}")
    assert proc.returncode == rexec.EXIT_USAGE
    assert b"is every interface" in err


# -- ending ----------------------------------------------------------------------------------


def test_the_remote_group_is_killed_when_the_client_goes_away(
    tmp_path: Path, server: Server
) -> None:
    pids = tmp_path / "pids"
    client = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            str(REXEC),
            "agent",
            "node1",
            f"sleep 300 & echo $$ $! > {pids}; wait",
        ],
        env=agent_env(tmp_path, {"node1": server.port}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert wait_until(lambda: pids.exists() and pids.read_text().endswith("\n"))
    shell, sleeper = map(int, pids.read_text().split())
    assert alive(shell) and alive(sleeper)
    client.kill()  # as when mpirun dies: the connection just ends
    client.wait()
    assert wait_until(lambda: not alive(shell) and not alive(sleeper)), server.log_text()
    assert "went away; killing its command" in server.log_text()


def test_sigterm_stops_the_server_and_its_commands(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    client = subprocess.Popen(
        [sys.executable, "-I", "-S", str(REXEC), "agent", "node1", "echo started; sleep 300"],
        env=agent_env(tmp_path, {"node1": server.port}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert client.stdout is not None
    assert client.stdout.readline() == b"started\n"
    assert stop(server) == 0
    # The command was killed, and the client heard how it ended.
    assert client.wait(15) == 128 + signal.SIGTERM


def test_daemons_get_their_nodes_host_name(tmp_path: Path) -> None:
    # Virtual nodes share one host: each worker's daemons get their node's name, so that MPI
    # tells the nodes apart (docs/distributed.md).
    server = start_server(tmp_path, GPUYARD_REXEC_HOSTNAME="vnode1")
    try:
        remote = agent(tmp_path, "node1", "hostname", hosts={"node1": server.port})
        local = agent(
            tmp_path,
            "node0",
            "hostname",
            hosts={"node1": server.port},
            GPUYARD_REXEC_HOSTNAME="vnode0",
        )
    finally:
        stop(server)
    if "cannot take the host name" in server.log_text():
        pytest.skip(f"no UTS namespaces here: {server.log_text()}")
    assert (remote.stdout, local.stdout) == (b"vnode1\n", b"vnode0\n"), local.stderr
    assert socket.gethostname() not in ("vnode0", "vnode1")  # ours is untouched


# -- pure parts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["node1", "prted", "--x"], ("node1", ["prted", "--x"])),
        (["-x", "node1", "a"], ("node1", ["a"])),
        (["-qx", "-o", "K=v", "-oK=v", "-p", "22", "-l", "me", "n", "a"], ("n", ["a"])),
        (["--", "-weird-host", "a"], ("-weird-host", ["a"])),
    ],
)
def test_ssh_style_arguments(args: list[str], expected: tuple[str, list[str]]) -> None:
    assert rexec._parse_agent_args(args) == expected


@pytest.mark.parametrize("args", [[], ["node1"], ["-Z", "node1", "a"], ["-o"]])
def test_arguments_it_cannot_honour_are_errors(args: list[str]) -> None:
    with pytest.raises(channel.AgentError):
        rexec._parse_agent_args(args)


def test_exit_status_of_a_signalled_process() -> None:
    assert (channel.exit_status(0), channel.exit_status(3), channel.exit_status(-9)) == (0, 3, 137)
