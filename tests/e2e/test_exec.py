"""Held jobs and `gpuyard exec` (issue 14, point 7; reference 000's jmt), end to end: a real
pool of two virtual nodes, real workers under their supervisors, driven through the real CLI.

1. keep_failed: a job that fails for good is held with its nodes (another job waits for them)
   and fails at the end of its hold, which frees them.
2. stop -> run a command on every node -> its logs -> the node check -> start: the job runs
   again as its next attempt on the same nodes and completes; each step is a usercall of the
   ft-log. Refusals on the way: a user with read-only access gets 403 on every exec action, a
   run on a job that is not held a clear 409, bad input a clear error.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import psutil
import pytest

from gpuyard.errors import InvalidSpec, NotFound
from gpuyard.settings import Settings
from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("jmt")]

PYTHON = sys.executable
EXEC = 200_000


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("jmt") / "home"
    pool = ServerProcess(
        home, "--virtual-nodes", "2", "--gpus-per-node", "1", "--cpus-per-node", "1"
    ).start()
    yield pool
    pool.stop()


def execute(pool: ServerProcess, job_id: int, verb: str, *args: str) -> Any:
    """``gpuyard exec JOB VERB --json ARGS…`` (--json first: a command follows --)."""
    return json.loads(pool.cli("exec", str(job_id), verb, "--json", *args).stdout)


def show(pool: ServerProcess, job_id: int) -> dict[str, Any]:
    return pool.job(job_id)


def wait_for(
    pool: ServerProcess, job_id: int, states: set[str], timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = show(pool, job_id)
        if job["state"] in states or job["status"] in states:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} is {job['state']}, not {states}: {pool.log_tail()}")
        time.sleep(0.2)


def wait_run(
    pool: ServerProcess, job_id: int, ranks: list[int], timeout: float = 90
) -> dict[int, Any]:
    """The exec workers of ``ranks`` once each has ended."""
    deadline = time.monotonic() + timeout
    while True:
        status = pool.client.exec_status(job_id).model_dump(mode="json")
        workers = {w["rank"]: w for w in status["workers"] if w["rank"] in ranks}
        if len(workers) == len(ranks) and all(
            w["state"] in ("exited", "lost") for w in workers.values()
        ):
            return workers
        if time.monotonic() > deadline:
            raise AssertionError(f"run {ranks} of job {job_id} did not end: {status}")
        time.sleep(0.3)


def test_a_failed_job_is_held_with_its_nodes_and_fails_at_its_limit(pool: ServerProcess) -> None:
    # Rank 1 fails at once; rank 0 would sleep: it is stopped, as a failure stops it.
    script = (
        "import os, sys, time\n"
        "if os.environ['GPUYARD_NODE_RANK'] == '1': sys.exit(3)\n"
        "time.sleep(600)\n"
    )
    kept = pool.cli_json(
        "submit", "--name", "kept", "--nodes", "2", "--gpus", "1", "--max-restarts", "0",
        "--keep-failed", "8s", "--graceful-shutdown", "2", "--", PYTHON, "-c", script,
    )["id"]  # fmt: skip
    job = wait_for(pool, kept, {"held"})
    held_at = time.monotonic()
    assert job["status"] == "running" and job["exit_code"] == 3
    assert "kept for debugging for at most 8s" in job["reason"]
    assert {s["node"] for s in job["placement"]} == {"node0", "node1"}
    assert {w["state"] for w in job["workers"]} == {"exited"}  # rank 0 was stopped

    waiting = pool.cli_json("submit", "--name", "next", "--nodes", "2", "--gpus", "1", "--", "true")

    job = wait_for(pool, kept, {"failed"}, timeout=30)
    assert time.monotonic() - held_at >= 5
    assert job["exit_code"] == 3
    assert job["reason"].endswith("its hold ended at its time limit"), job["reason"]
    after = wait_for(pool, waiting["id"], {"succeeded"})
    # The held job kept its nodes: the next one started only once the hold had ended (compared
    # by the pool's own times, so a slow machine cannot make it pass or fail by accident).
    assert datetime.fromisoformat(after["started_at"]) >= datetime.fromisoformat(job["finished_at"])
    [fault] = pool.cli_json("ft-log", str(kept))
    assert fault["kind"] == "failure"
    assert "held for debugging first, for 8s" in fault["action"]


def test_stop_run_check_start_and_the_job_completes(pool: ServerProcess) -> None:
    # Its first attempt waits until it is stopped; its next one (after `start`) succeeds.
    job_id = pool.cli_json(
        "submit", "--name", "debugged", "--nodes", "2", "--gpus", "1", "--access", "read-only",
        "--graceful-shutdown", "3", "--", "bash", "-c",
        'test "$GPUYARD_ATTEMPT" != 0 || exec sleep 600',
    )["id"]  # fmt: skip
    wait_for(pool, job_id, {"running"})
    [me] = [u["name"] for u in pool.cli_json("users") if u["role"] == "admin"]
    refused = pool.cli("exec", str(job_id), "run", "--", "hostname", check=False)
    assert refused.returncode == 1
    assert f"job {job_id} is not held, so you cannot run a command in it" in refused.stderr

    stopped = pool.cli("exec", str(job_id), "stop", "--hold", "10m").stdout
    assert "told to exit" in stopped
    job = wait_for(pool, job_id, {"held"})
    assert job["held_until"] is not None and job["status"] == "running"

    ran = execute(pool, job_id, "run", "--", "hostname")
    assert ran["ranks"] == [EXEC, EXEC + 1]
    workers = wait_run(pool, job_id, [EXEC, EXEC + 1])
    assert [(w["node"], w["exit_code"]) for w in workers.values()] == [("node0", 0), ("node1", 0)]
    for rank in (EXEC, EXEC + 1):
        log = pool.cli("logs", str(job_id), "--worker", str(rank)).stdout
        assert log.strip() == socket.gethostname()

    # In the context of each node's worker: its environment, its working directory (the CLI
    # submitted it with the directory it ran in), a workspace of its own.
    context = execute(
        pool, job_id, "run", "--", "bash", "-c",
        'echo "$GPUYARD_NODE_NAME $GPUYARD_NODE_RANK $GPUYARD_EXEC_RANK"; pwd; '
        'echo "$GPUYARD_WORKSPACE"',
    )  # fmt: skip
    assert context["ranks"] == [EXEC + 2, EXEC + 3]
    wait_run(pool, job_id, context["ranks"])
    for rank, node_rank in ((EXEC + 2, 0), (EXEC + 3, 1)):
        log = pool.cli("logs", str(job_id), "--worker", str(rank)).stdout
        first, where, workspace = log.splitlines()
        assert first == f"node{node_rank} {node_rank} {rank}"
        assert where == os.getcwd()
        assert workspace.endswith(f"/jobs/{job_id}/attempts/0/worker-{rank}/workspace")

    # The node check of the pre-flight, on the held job's nodes.
    check = execute(pool, job_id, "run", "-t", "checker")
    checks = wait_run(pool, job_id, check["ranks"], timeout=120)
    assert {w["role"] for w in checks.values()} == {"check"}
    shown = execute(pool, job_id, "status")["workers"]  # the CLI's `exec status --json`
    assert {w["rank"]: w for w in shown if w["rank"] in checks} == checks
    deadline = time.monotonic() + 20
    while True:
        entries = [e.model_dump(mode="json") for e in pool.client.faults(job_id)]
        if entries[-1]["outcome"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert entries[-1]["cause"] == "exec run -t checker"
    assert entries[-1]["outcome"] == "the node check passed on node0, node1", entries[-1]

    _refusals(pool, job_id)

    started = pool.cli("exec", str(job_id), "start").stdout
    assert "restarting as attempt 1" in started
    job = wait_for(pool, job_id, {"succeeded", "failed", "stopped", "expired"})
    assert (job["status"], job["attempt"]) == ("succeeded", 1), job
    entries = pool.cli_json("ft-log", str(job_id))
    assert [(e["kind"], e["cause"], e["actor"]) for e in entries] == [
        ("usercall", "exec stop --hold 10m00s", f"user:{me}"),
        ("usercall", "exec run hostname", f"user:{me}"),
        ("usercall", entries[2]["cause"], f"user:{me}"),
        ("usercall", "exec run -t checker", f"user:{me}"),
        ("usercall", "exec start", f"user:{me}"),
    ]
    assert entries[2]["cause"].startswith("exec run bash -c")
    assert "worker 200000 on node0 exited with code 0" in entries[1]["outcome"]
    assert entries[4]["outcome"].startswith("running again on node0, node1 as attempt 1")


def _refusals(pool: ServerProcess, job_id: int) -> None:
    """On a held job: bad input is a clear error; a user with read-only access (the job's
    access for its group) gets 403 on every exec action."""
    empty = pool.cli("exec", str(job_id), "run", check=False)
    assert empty.returncode == 2 and "command is empty" in empty.stderr
    unknown = pool.cli("exec", str(job_id), "kill", "99", check=False)
    assert unknown.returncode == 1
    assert f"job {job_id} has no worker 99 in its attempt 0" in unknown.stderr

    pool.cli("users", "add", "rita")
    token = json.loads(pool.cli("tokens", "create", "rita", "--json").stdout)["token"]
    base = f"{pool.url}/api/v1/jobs/{job_id}/exec"
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{pool.url}/api/v1/jobs/{job_id}", headers=headers).status_code == 200
    for method, path, body in [
        ("GET", "", None),
        ("POST", "/stop", None),
        ("POST", "/start", None),
        ("POST", "/run", {"command": ["id"]}),
        ("POST", "/run", {"target": "checker"}),
        ("POST", "/kill", {"ranks": [EXEC]}),
    ]:
        response = httpx.request(method, base + path, headers=headers, json=body)
        assert response.status_code == 403, (path, response.text)
        assert "read-only" in response.json()["detail"]


def test_a_shell_in_a_held_jobs_worker(pool: ServerProcess) -> None:
    """A real terminal in the worker's context (its node, environment, working directory),
    resized as the person's window is, its exit code the session's; the shell and what it
    started are killed when the connection drops; bad control messages end the session."""
    from gpuyard.client import Client, PermissionDenied
    from gpuyard.client.shell import ShellConnection, ShellEnded

    job_id = pool.cli_json(
        "submit", "--name", "shelled", "--nodes", "2", "--gpus", "1", "--access", "read-only",
        "--graceful-shutdown", "2", "--env", "MINE=mine", "--", "sleep", "600",
    )["id"]  # fmt: skip
    wait_for(pool, job_id, {"running"})
    pool.cli("exec", str(job_id), "stop")
    wait_for(pool, job_id, {"held"})
    client = Client(url=pool.url, settings=Settings(home=pool.home))

    def drain(conn: ShellConnection, until: str = "", timeout: float = 30) -> tuple[str, int]:
        """Output until ``until`` (a regex) matches it, or until the shell ends (its code)."""
        out, deadline = b"", time.monotonic() + timeout
        while not until or not re.search(until, out.decode(errors="replace")):
            try:
                out += conn.recv(timeout=max(0.1, deadline - time.monotonic()))
            except ShellEnded as ended:
                return out.decode(errors="replace"), -1 if ended.code is None else ended.code
            except TimeoutError:
                raise AssertionError(f"no {until!r} in {out!r}") from None
        return out.decode(errors="replace"), -2

    with client.open_shell(job_id, worker=1, rows=30, cols=100) as conn:
        assert conn.node == "node1" and conn.rank == EXEC
        conn.send(b'echo "ctx=$GPUYARD_NODE_NAME,$GPUYARD_JOB_ID,$MINE,$(pwd)"; stty size\n')
        out, _ = drain(conn, r"\n30 100")
        assert f"ctx=node1,{job_id},mine,{os.getcwd()}" in out, out
        conn.resize(40, 132)
        conn.send(b"stty size; tty; exit 7\n")
        out, code = drain(conn)
        assert "40 132" in out and "/dev/pts/" in out, out
        assert code == 7
    # The pool records the exit in its own pass after the session told it (asynchronously).
    shell = wait_run(pool, job_id, [EXEC])[EXEC]
    assert (shell["role"], shell["state"], shell["exit_code"]) == ("shell", "exited", 7)

    # A dropped connection kills the shell and what it started in the background.
    conn = client.open_shell(job_id, worker=0)
    conn.send(b"sleep 1000 & echo pid=$!\n")
    out, _ = drain(conn, r"pid=\d+")
    sleeper = int(re.findall(r"pid=(\d+)", out)[0])
    assert psutil.pid_exists(sleeper)
    conn.close()
    deadline = time.monotonic() + 20
    while psutil.pid_exists(sleeper) and psutil.Process(sleeper).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the shell's background process outlived it"
        time.sleep(0.2)
    wait_run(pool, job_id, [EXEC + 1])

    # Hostile control messages end the session (and the shell); sizes are bounded.
    with client.open_shell(job_id) as conn:
        conn._socket.send('{"resize": {"rows": 70000, "cols": 1}}')
        with pytest.raises(InvalidSpec, match="1 to 1000 rows and columns"):
            drain(conn)
    wait_run(pool, job_id, [EXEC + 2])
    with pytest.raises(InvalidSpec, match="1 to 1000 rows"):
        client.open_shell(job_id, rows=0)

    # Who may not exec into it may not have a shell either; nor on a job that is not held.
    pool.cli("users", "add", "sam")
    token = json.loads(pool.cli("tokens", "create", "sam", "--json").stdout)["token"]
    with pytest.raises(PermissionDenied, match="read-only"):
        Client(url=pool.url, token=token).open_shell(job_id)
    with pytest.raises(NotFound, match="has no worker 5"):
        client.open_shell(job_id, worker=5)

    # The CLI: raw terminal, the shell's exit code as its own.
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        argv = [PYTHON, "-m", "gpuyard", "exec", str(job_id), "shell"]
        os.execvpe(PYTHON, argv, pool.env)  # noqa: S606 - an argv, no shell
    seen = b""
    os.write(fd, b"echo cli-$((6*7)); exit 5\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status_code = os.waitpid(pid, 0)
    os.close(fd)
    assert b"cli-42" in seen, seen
    assert os.waitstatus_to_exitcode(status_code) == 5, seen

    pool.cli("stop", str(job_id))
    assert wait_for(pool, job_id, {"stopped"})["status"] == "stopped"
