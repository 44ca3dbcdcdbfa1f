"""A real pool run by root runs each job as its owner's OS account (docs/security.md)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as other OS accounts needs root"),
]


class OwnerPool(ServerProcess):
    """A pool whose jobs run as their owners, with a pool user of this test's own (so that
    the account made for it, gpy-<user>, is this test's to remove)."""

    def __init__(self, home: Path, user: str) -> None:
        super().__init__(home, "--virtual-nodes", "1", run_as="owner")
        self.user = user

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, "GPUYARD_USER": self.user}


def workdir_flags(pool: OwnerPool) -> list[str]:
    """A working directory every account may enter (the CLI's default, the current one, may
    be this checkout, private to root in a fresh clone under ``mktemp -d``)."""
    return ["--workdir", str(pool.home.parent)]


@pytest.fixture
def pool() -> Iterator[OwnerPool]:
    # pytest's temporary directories are private to root: the home must be one every
    # account can pass through.
    base = Path(tempfile.mkdtemp(prefix="gpuyard-e2e-run-as-"))
    base.chmod(0o711)
    pool = OwnerPool(base / "home", f"e2e{secrets.token_hex(4)}")
    try:
        yield pool.start()
    finally:
        pool.stop()
        account = f"gpy-{pool.user}"
        with contextlib.suppress(KeyError):
            uid = pwd.getpwnam(account).pw_uid
            for proc in psutil.process_iter(["uids"]):  # only this test's account runs them
                if proc.info["uids"].real == uid:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
            time.sleep(0.2)
            subprocess.run(["userdel", account], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_a_job_runs_as_its_owners_account_and_cannot_read_the_pools_database(
    pool: OwnerPool,
) -> None:
    database = pool.home / "gpuyard.db"
    probe = f"cat {database} >/dev/null 2>&1 && echo db-read || echo db-denied"
    job = pool.cli_json("submit", *workdir_flags(pool), "--", f'sh -c "id -un; id -u; {probe}"')
    done = pool.wait_status(job["id"], {"succeeded", "failed"})
    log = pool.cli("logs", str(job["id"])).stdout
    assert done["status"] == "succeeded", log
    account = f"gpy-{pool.user}"
    assert log.splitlines() == [account, str(pwd.getpwnam(account).pw_uid), "db-denied"]
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert stat.S_IMODE(pool.home.stat().st_mode) == 0o711
    assert "cannot reach the pool's home" not in pool.log_tail()


def test_a_plain_user_signed_in_elsewhere_reaches_nothing_of_anyone_else(
    pool: OwnerPool, tmp_path: Path
) -> None:
    """Issue 10's acceptance, end to end: a plain user with a token of their own fails to
    become admin, to see the owner's job, and, from inside a job, to read the database, the
    owner's token, the owner's job directory or its processes' environment (where its job
    token, the key to its remote-exec channel, lives)."""
    owner_job = pool.cli_json("submit", *workdir_flags(pool), "--", "sleep 60")
    pool.wait_status(owner_job["id"], {"running"})
    mallory = f"m{secrets.token_hex(4)}"
    pool.cli("groups", "add", "outsiders")
    pool.cli("users", "add", mallory, "--group", "outsiders")
    token = json.loads(pool.cli("tokens", "create", mallory, "--json").stdout)["token"]
    env = {
        **{k: v for k, v in pool.env.items() if k != "GPUYARD_HOME"},
        "GPUYARD_HOME": str(tmp_path / "elsewhere"),
        "GPUYARD_URL": pool.url,
        "GPUYARD_TOKEN": token,
    }

    def as_mallory(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuyard", *args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )

    promote = as_mallory("users", "set", mallory, "--role", "admin")
    assert promote.returncode == 1 and "only admins may change users" in promote.stderr
    hidden = as_mallory("show", str(owner_job["id"]))
    assert f"job {owner_job['id']} does not exist" in hidden.stderr
    stop = as_mallory("stop", str(owner_job["id"]))
    assert stop.returncode == 1 and "does not exist" in stop.stderr

    home = pool.home
    owner_dir = home / "jobs" / str(owner_job["id"])
    probes = " ; ".join(
        [
            f"cat {home / 'gpuyard.db'} >/dev/null 2>&1 && echo db-read || echo db-denied",
            f"cat {home / 'owner.token'} >/dev/null 2>&1 && echo token-read || echo token-denied",
            f"ls {owner_dir} >/dev/null 2>&1 && echo dir-read || echo dir-denied",
            # Every environment this job can read: only its own job's.
            "for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null | tr '\\0' '\\n'; done"
            " | grep '^GPUYARD_JOB_ID=' | sort -u",
        ]
    )
    scripts = Path(tempfile.mkdtemp(prefix="gpuyard-e2e-probe-"))
    scripts.chmod(0o755)
    (scripts / "probe.sh").write_text(probes + "\n")
    (scripts / "probe.sh").chmod(0o644)
    submitted = as_mallory(
        "submit", "--json", *workdir_flags(pool), "--", f"sh {scripts / 'probe.sh'}"
    )
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    deadline = time.monotonic() + 60
    while as_mallory("wait", str(job["id"])).returncode not in (0, 1):
        assert time.monotonic() < deadline
    log = as_mallory("logs", str(job["id"])).stdout
    assert log.splitlines() == [
        "db-denied",
        "token-denied",
        "dir-denied",
        f"GPUYARD_JOB_ID={job['id']}",
    ], log
    shutil.rmtree(scripts, ignore_errors=True)
    pool.cli("stop", str(owner_job["id"]))
    with contextlib.suppress(KeyError):
        subprocess.run(["userdel", f"gpy-{mallory}"], check=False, capture_output=True)


def test_a_shell_runs_as_its_jobs_account_and_reaches_nothing_of_anyone_else(
    pool: OwnerPool, tmp_path: Path
) -> None:
    """`gpuyard exec JOB shell` of a held job (issue 14, point 3): the terminal and every
    process of it are the job's account's, inside the job's context; the pool's files and
    another user's job stay out of reach, as they do for the job itself."""
    from gpuyard.client import Client
    from gpuyard.client.shell import ShellEnded

    owner_job = pool.cli_json("submit", *workdir_flags(pool), "--", "sleep 60")
    pool.wait_status(owner_job["id"], {"running"})
    mallory = f"m{secrets.token_hex(4)}"
    pool.cli("users", "add", mallory)
    token = json.loads(pool.cli("tokens", "create", mallory, "--json").stdout)["token"]
    client = Client(url=pool.url, token=token)
    try:
        job = client.submit(
            {"command": "sleep 600", "workdir": str(pool.home.parent), "graceful_shutdown": 1}
        )
        deadline = time.monotonic() + 60
        while client.job(job.id).state.value != "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        client.exec_stop(job.id)
        while client.job(job.id).state.value != "held":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        home = pool.home
        probes = " ; ".join(
            [
                "id -un",
                "stat -c %U $(tty)",
                f"cat {home / 'gpuyard.db'} >/dev/null 2>&1 && echo db-read || echo db-denied",
                f"cat {home / 'owner.token'} >/dev/null 2>&1 && echo token-read "
                "|| echo token-denied",
                f"ls {home / 'jobs' / str(owner_job['id'])} >/dev/null 2>&1 && echo dir-read "
                "|| echo dir-denied",
                "echo done-$((40+2))",
            ]
        )
        out = b""
        with client.open_shell(job.id) as conn:
            conn.send(f"{probes}; exit 0\n".encode())
            with contextlib.suppress(ShellEnded):
                while True:
                    out += conn.recv(timeout=30)
        lines = [line.strip() for line in out.decode(errors="replace").splitlines()]
        account = f"gpy-{mallory}"
        answers = lines[lines.index(account) :]
        assert answers[:6] == [
            account,
            account,
            "db-denied",
            "token-denied",
            "dir-denied",
            "done-42",
        ]
    finally:
        pool.cli("stop", str(owner_job["id"]), check=False)
        with contextlib.suppress(Exception):
            client.stop(job.id)
            client.wait(job.id, timeout=30)
        subprocess.run(["userdel", f"gpy-{mallory}"], check=False, capture_output=True)


def test_a_read_write_group_member_holds_a_job_but_never_runs_as_its_owner(
    pool: OwnerPool,
) -> None:
    """Issue 24, point 1: `exec JOB stop` then `exec JOB run` by a read-write member of the
    job's group ran as the owner's account. Now holding is all it may do: running, killing,
    starting and shells are the owner's, on a real pool whose jobs run as their owners."""
    from gpuyard.client import Client, PermissionDenied

    suffix = secrets.token_hex(4)
    group, owner, member = f"g{suffix}", f"o{suffix}", f"w{suffix}"
    pool.cli("groups", "add", group)
    clients = {}
    for name in (owner, member):
        pool.cli("users", "add", name, "--group", group)
        token = json.loads(pool.cli("tokens", "create", name, "--json").stdout)["token"]
        clients[name] = Client(url=pool.url, token=token)
    alice, wanda = clients[owner], clients[member]
    job = alice.submit(
        {
            "command": "sleep 600",
            "workdir": str(pool.home.parent),
            "graceful_shutdown": 1,
            "access": "read-write",
        }
    )
    try:
        deadline = time.monotonic() + 60
        while alice.job(job.id).state.value != "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        wanda.exec_stop(job.id)  # a read-write member may hold it
        while alice.job(job.id).state.value != "held":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        with pytest.raises(PermissionDenied, match="only its owner may"):
            wanda.exec_run(job.id, ["id", "-un"])
        with pytest.raises(PermissionDenied, match="only its owner may"):
            wanda.open_shell(job.id)
        with pytest.raises(PermissionDenied, match="only its owner may"):
            wanda.exec_start(job.id)
        assert [w.rank for w in alice.exec_status(job.id).workers] == [0]  # nothing ran
        ran = alice.exec_run(job.id, ["id", "-un"])  # its owner may
        deadline = time.monotonic() + 60
        while "gpy-" not in alice.logs(job.id, worker=ran.ranks[0]).data:
            assert time.monotonic() < deadline, "the owner's command did not run"
            time.sleep(0.2)
        assert alice.logs(job.id, worker=ran.ranks[0]).data.strip() == f"gpy-{owner}"
    finally:
        with contextlib.suppress(Exception):
            alice.stop(job.id)
            alice.wait(job.id, timeout=30)
        for name in (owner, member):
            subprocess.run(["userdel", f"gpy-{name}"], check=False, capture_output=True)


def test_a_program_its_account_cannot_run_is_refused_at_submission(
    pool: OwnerPool, tmp_path: Path
) -> None:
    # The submitter's virtual environment under a directory only root may search (pytest's
    # are 0700), as a venv under /root is: its program would fail at launch as gpy-<user>.
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "mytrainer").write_text("#!/bin/sh\necho trained\n")
    (venv_bin / "mytrainer").chmod(0o755)
    submitted = subprocess.run(
        [sys.executable, "-m", "gpuyard", "submit", *workdir_flags(pool), "--", "mytrainer"],
        env={**pool.env, "PATH": f"{venv_bin}:{pool.env['PATH']}", "COLUMNS": "400"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert submitted.returncode == 2, submitted.stderr
    said = " ".join(submitted.stderr.split())
    assert f"the job's account 'gpy-{pool.user}' cannot run 'mytrainer'" in said
    assert f"(found at {venv_bin}/mytrainer on the job's PATH)" in said
    assert "or run the job in an image (--image)" in said
    assert pool.cli_json("ls")["total"] == 0  # refused before anything was stored
