"""Jobs run as their owner's OS account, with real accounts, processes and mounts
(docs/security.md, "Jobs run as their owner").

Every test here makes OS accounts of its own (``gpy-t<random>…``, removed at the end) and runs
the real local executor as root, as a pool that switches users does. Pytest's temporary
directories are private to the user running the tests (``/tmp/pytest-of-root`` is 0700), so
these pools live in a directory every account can pass through, made here.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from gpuyard.executors.base import LaunchError
from gpuyard.executors.local import cgroups
from gpuyard.executors.local.accounts import Accounts
from gpuyard.executors.local.executor import REXEC, LocalExecutor
from gpuyard.models.worker import Bind, File, Handle, WorkerKey, WorkerLaunch, WorkerState
from gpuyard.store.engine import Store
from gpuyard.testing.waits import wait_log
from gpuyard.testing.waits import whole_log as log

MakeExecutor = Callable[..., LocalExecutor]
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="running jobs as other OS accounts needs root (only root can)"
)

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

Account = Callable[[str], str]


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def made_accounts() -> Iterator[list[str]]:
    """Names of the accounts a test made (or had the executor make): removed at the end, once
    no process of theirs is left."""
    names: list[str] = []
    yield names
    for name in names:
        remove_account(name)


@pytest.fixture
def account(made_accounts: list[str]) -> Account:
    """``account(tag)``: a fresh pool account name (``gpy-t<random><tag>``), not made yet (the
    executor makes it at the first launch that names it)."""

    def make(tag: str) -> str:
        name = f"gpy-t{secrets.token_hex(4)}{tag}"
        made_accounts.append(name)
        return name

    return make


@pytest.fixture
def base(
    made_accounts: list[str], worker_processes: Callable[[Path], list[psutil.Process]]
) -> Iterator[Path]:
    """A directory every account can pass through (0711), outside pytest's private ones."""
    path = Path(tempfile.mkdtemp(prefix="gpuyard-run-as-"))
    path.chmod(0o711)
    yield path
    for proc in worker_processes(path):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def executor(base: Path, make_executor: MakeExecutor) -> LocalExecutor:
    return make_executor(base / "home")


def remove_account(name: str) -> None:
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"].real == uid]
        if not left:
            break
        for proc in left:  # only this test's own account runs them
            with contextlib.suppress(psutil.Error):
                proc.kill()
        time.sleep(0.05)
    subprocess.run(["userdel", name], check=False, capture_output=True)


# -- helpers -----------------------------------------------------------------------------------


def launch(
    ex: LocalExecutor,
    script: str | list[str],
    *,
    run_as: str | None,
    job: int = 1,
    rank: int = 0,
    env: dict[str, str] | None = None,
    binds: tuple[Bind, ...] = (),
    files: dict[str, File] | None = None,
) -> Handle:
    argv = ["sh", "-c", script] if isinstance(script, str) else script
    return ex.launch(
        WorkerLaunch(
            WorkerKey(job, 0, rank),
            "local",
            argv,
            {**ENV, **(env or {})},
            str(workspace(ex, job, rank)),
            5.0,
            binds=binds,
            files=files or {},
            run_as=run_as,
        )
    )


def workspace(ex: LocalExecutor, job: int, rank: int = 0) -> Path:
    return ex.worker_dir(job, 0, rank) / "workspace"


def wait_exit(ex: LocalExecutor, handle: Handle, timeout: float = 20) -> tuple[int | None, str]:
    deadline = time.monotonic() + timeout
    while True:
        [status] = ex.status([handle])
        if status.state is WorkerState.EXITED:
            return status.exit_code, status.message
        assert status.state is WorkerState.RUNNING, status
        if time.monotonic() > deadline:
            raise AssertionError(f"worker still running after {timeout}s: {log(ex, handle)}")
        time.sleep(0.02)


def command_pid(handle: Handle) -> int:
    """The worker's command (its process group leader), from the supervisor's state."""
    state = json.loads((Path(handle["supervisor"]) / "state.json").read_text())
    return int(state["pid"])


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# -- who runs the job --------------------------------------------------------------------------


def test_a_job_runs_as_its_owners_account_never_root(
    executor: LocalExecutor, account: Account
) -> None:
    name = account("a")
    script = (
        "id -u; id -g; echo $HOME $USER; umask; touch mine; stat -c '%u %a' mine; "
        "cat /proc/self/cgroup; echo ready; exec sleep 60"
    )
    handle = launch(executor, script, run_as=name)
    wait_log(executor, handle, "ready")
    entry = pwd.getpwnam(name)  # made by the executor: a system account, no login
    assert (entry.pw_dir, entry.pw_shell) == ("/nonexistent", "/usr/sbin/nologin")
    assert entry.pw_uid != 0 and entry.pw_gid != 0
    lines = log(executor, handle).splitlines()
    assert lines[:5] == [
        str(entry.pw_uid),
        str(entry.pw_gid),
        f"{workspace(executor, 1)} {name}",
        "0077",
        f"{entry.pw_uid} 600",  # what the job makes is its account's alone
    ]
    if executor.isolation.mode != cgroups.NONE:  # joined as root, before the switch
        assert any(line.endswith("/1-0-0") for line in lines[5:-1]), lines
    job = psutil.Process(command_pid(handle))
    assert set(job.uids()) == {entry.pw_uid} and set(job.gids()) == {entry.pw_gid}
    supervisor = psutil.Process(handle["pid"])
    assert supervisor.uids().effective == 0  # it manages cgroups and signals
    executor.terminate(handle, grace=5)
    assert wait_exit(executor, handle)[0] == 143


def test_a_job_cannot_read_the_pools_files_nor_another_owners_job(
    executor: LocalExecutor, account: Account
) -> None:
    home = executor.home
    store = Store(f"sqlite:///{home / 'gpuyard.db'}")
    store.migrate()
    store.close()
    alice, bob = account("alice"), account("bob")
    bob_job = Path(executor.job_dir(2))
    secret = "bob-" + secrets.token_hex(8)
    bob_handle = launch(
        executor,
        f"echo {secret} > {bob_job}/outputs/secret; echo ready; exec sleep 60",
        run_as=bob,
        job=2,
        env={"GPUYARD_JOB_TOKEN": secret},
    )
    wait_log(executor, bob_handle, "ready")
    bob_pid = command_pid(bob_handle)
    targets = {
        "the database": f"cat {home}/gpuyard.db",
        "writing the database": f"sh -c 'echo x >> {home}/gpuyard.db'",
        "the home's listing": f"ls {home}",
        "the jobs' listing": f"ls {home}/jobs",
        "the supervisors": f"ls {home}/supervisors",
        "bob's spec": f"cat {executor.supervisor_dir(WorkerKey(2, 0, 0))}/spec.json",
        "bob's job directory": f"ls {bob_job}",
        "bob's outputs": f"cat {bob_job}/outputs/secret",
        "bob's log": f"cat {bob_job}/attempts/0/worker-0/log",
        "bob's environment": f"cat /proc/{bob_pid}/environ",
        "its own job directory": f"ls {executor.job_dir(1)}",
        "its own log": f"cat {executor.job_dir(1)}/attempts/0/worker-0/log",
    }
    script = "".join(
        f'if {command} >/dev/null 2>&1; then echo "read: {what}"; else echo "denied: {what}"; fi; '
        for what, command in targets.items()
    )
    handle = launch(executor, script, run_as=alice)
    assert wait_exit(executor, handle)[0] == 0
    outcome = dict(line.split(": ", 1)[::-1] for line in log(executor, handle).splitlines())
    assert outcome == {
        what: "read" if what.startswith("its own") else "denied" for what in targets
    }, log(executor, handle)
    assert mode(home) == 0o711 and mode(home / "jobs") == 0o711
    assert mode(home / "gpuyard.db") == 0o600
    assert mode(home / "supervisors") == 0o700
    assert mode(bob_job) == 0o750 and os.stat(bob_job).st_uid == 0
    assert os.stat(bob_job).st_gid == pwd.getpwnam(bob).pw_gid
    assert secret in (bob_job / "outputs" / "secret").read_text()  # bob's own job could


def test_a_home_other_accounts_cannot_reach_fails_the_job_at_once_saying_why(
    make_executor: MakeExecutor, tmp_path: Path, account: Account
) -> None:
    executor = make_executor(tmp_path / "home")  # below pytest's private directory
    assert "cannot reach the pool's home" in executor.unreachable_home()
    started = time.monotonic()
    handle = launch(executor, "true", run_as=account("x"))
    code, message = wait_exit(executor, handle)
    assert time.monotonic() - started < 10
    assert code == 126
    assert "cannot reach the worker's workspace" in message and "\n" not in message


# -- accounts that are refused, or made ---------------------------------------------------------


def test_root_is_refused_at_launch_with_a_readable_reason(executor: LocalExecutor) -> None:
    with pytest.raises(LaunchError) as refused:
        launch(executor, "id", run_as="root")
    assert "refusing to run the job as the OS account 'root': it has uid 0" in str(refused.value)
    assert not executor.supervisor_dir(WorkerKey(1, 0, 0)).exists()  # nothing started


def test_an_admin_mapped_account_that_does_not_exist_is_not_made(
    executor: LocalExecutor,
) -> None:
    name = f"gyt{secrets.token_hex(4)}"
    with pytest.raises(LaunchError, match=f"the OS account '{name}' .* does not exist"):
        launch(executor, "id", run_as=name)
    with pytest.raises(KeyError):
        pwd.getpwnam(name)


def test_an_admin_mapped_account_is_used_as_it_is(
    executor: LocalExecutor, made_accounts: list[str]
) -> None:
    name = f"gyt{secrets.token_hex(4)}"
    made_accounts.append(name)
    subprocess.run(["useradd", "--system", "--user-group", "-M", name], check=True)
    handle = launch(executor, "id -un", run_as=name)
    assert wait_exit(executor, handle)[0] == 0
    assert log(executor, handle) == f"{name}\n"


def test_workers_racing_to_make_one_account_all_start(
    executor: LocalExecutor, account: Account
) -> None:
    name = account("race")
    handles: list[Handle] = []
    errors: list[BaseException] = []

    def start(rank: int) -> None:
        try:
            handles.append(launch(executor, "id -un", run_as=name, rank=rank))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(rank,)) for rank in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [wait_exit(executor, h)[0] for h in handles] == [0] * 6
    assert {log(executor, h) for h in handles} == {f"{name}\n"}
    entries = Path("/etc/passwd").read_text().splitlines()
    assert sum(line.startswith(f"{name}:") for line in entries) == 1


# -- the workspace -------------------------------------------------------------------------------


def test_mounts_still_work_as_the_account_and_give_it_nothing_more(
    executor: LocalExecutor, account: Account, base: Path
) -> None:
    name = account("m")
    data = base / "data"
    data.mkdir(mode=0o755)
    (data / "train.txt").write_text("42\n")
    (data / "train.txt").chmod(0o644)
    ws = workspace(executor, 1)
    job = Path(executor.job_dir(1))
    volume = job / "outputs" / "vol"  # the account may make it there
    script = (
        "cat dataset/d/train.txt; "
        "touch dataset/d/new 2>/dev/null && echo dataset-writable || echo dataset-read-only; "
        "touch outputs/result && echo outputs-writable; touch volume/v/x && echo volume-writable; "
        "cat ../../task-0/hostfile"
    )
    handle = launch(
        executor,
        script,
        run_as=name,
        binds=(
            Bind(f"{ws}/dataset/d", str(data), True),
            Bind(f"{ws}/outputs", str(job / "outputs"), False),
            Bind(f"{ws}/volume/v", str(volume), False),
        ),
        files={f"{job}/attempts/0/task-0/hostfile": File("node0 slots=1\n")},
    )
    assert wait_exit(executor, handle)[0] == 0, log(executor, handle)
    text = log(executor, handle)
    assert text.startswith("42\n")
    assert "outputs-writable" in text and "volume-writable" in text
    assert text.endswith("node0 slots=1\n")
    workspace_mode = json.loads((Path(handle["supervisor"]) / "state.json").read_text())
    if workspace_mode["workspace"] == "bind":
        assert "dataset-read-only" in text and not (data / "new").exists()
    uid = pwd.getpwnam(name).pw_uid
    assert os.stat(volume).st_uid == uid and mode(volume) == 0o700
    assert os.stat(job / "outputs" / "result").st_uid == uid


@pytest.mark.parametrize(
    ("source", "readonly", "message"),
    [
        ("rootonly/vol", False, "cannot create the directory to mount, '{path}' as '{name}'"),
        ("private/data", True, "cannot reach the directory to mount, '{path}' as '{name}'"),
    ],
    ids=["a volume it may not make", "a dataset it may not read"],
)
def test_what_the_account_cannot_reach_is_not_mounted_and_the_job_fails_at_once(
    executor: LocalExecutor,
    account: Account,
    base: Path,
    source: str,
    readonly: bool,
    message: str,
) -> None:
    name = account("v")
    (base / "rootonly").mkdir(mode=0o755)  # root's: others may not make anything in it
    (base / "private" / "data").mkdir(parents=True)
    (base / "private").chmod(0o700)  # what a bind mount by root would otherwise expose
    path = base / source
    started = time.monotonic()
    handle = launch(
        executor,
        "ls mnt",
        run_as=name,
        binds=(Bind(f"{workspace(executor, 1)}/mnt", str(path), readonly),),
    )
    code, why = wait_exit(executor, handle)
    assert time.monotonic() - started < 10
    assert code == 126
    assert why.startswith(message.format(path=path, name=name)), why
    assert why.endswith("Permission denied") and "\n" not in why
    assert not (base / "rootonly" / "vol").exists()


def test_a_mount_point_the_job_turned_into_a_link_does_not_move_the_mount(
    executor: LocalExecutor, account: Account, base: Path
) -> None:
    """A job of the same account plants a link in the workspace of a worker about to start:
    the mount must not follow it (as root, onto /etc, say)."""
    name = account("l")
    ws = workspace(executor, 1)
    # What a job of this account could do to this workspace: a link where a mount goes.
    decoy = base / "decoy"
    decoy.mkdir(mode=0o755)
    os.makedirs(ws, exist_ok=True)
    os.symlink(decoy, ws / "dataset")
    data = base / "data"
    data.mkdir(mode=0o755)
    handle = launch(
        executor, "true", run_as=name, binds=(Bind(f"{ws}/dataset/d", str(data), True),)
    )
    code, why = wait_exit(executor, handle)
    assert code == 126, why
    assert why.startswith(f"cannot make the mount point '{ws}/dataset/d'"), why
    assert not (decoy / "d").exists()


# -- the remote-exec channel ---------------------------------------------------------------------


def python_for(uid: int, gid: int) -> str | None:
    """An interpreter (3.11 or newer) the account can run: this one may live where only root
    can reach (a Python under /root, as here)."""
    for candidate in (sys.executable, shutil.which("python3", path=ENV["PATH"]) or ""):
        if not candidate:
            continue
        with contextlib.suppress(OSError):
            done = subprocess.run(
                [candidate, "-I", "-S", "-c", "import sys; sys.exit(sys.version_info < (3, 11))"],
                user=uid,
                group=gid,
                extra_groups=[],
                cwd="/",
                capture_output=True,
                check=False,
            )
            if done.returncode == 0:
                return candidate
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_rexec_gives_a_valid_token_only_its_accounts_shell_and_refuses_another_jobs(
    executor: LocalExecutor, account: Account, base: Path
) -> None:
    alice, bob = account("ra"), account("rb")
    for name in (alice, bob):  # made now, to find a Python they can run
        Accounts(base / "accounts.lock").resolve(name)
    entry = pwd.getpwnam(bob)
    python = python_for(entry.pw_uid, entry.pw_gid)
    if python is None:
        pytest.skip("no Python 3.11+ on this machine that other accounts may run")
    # rexec.py runs on the stdlib and its package's stdlib-only channel.py; a copy of them
    # where the accounts may read them (and list their directories, to import the channel),
    # since this checkout may lie in a directory private to root (a fresh clone under mktemp -d).
    package, root = REXEC.parent.parent, base / "pool"
    for name in ("__init__.py", "injob/__init__.py", "injob/channel.py", "injob/rexec.py"):
        copy = root / "gpuyard" / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        for directory in (root, root / "gpuyard", copy.parent):
            directory.chmod(0o755)
        shutil.copyfile(package / name, copy)
        copy.chmod(0o644)
    rexec = root / "gpuyard" / "injob" / "rexec.py"
    token_a, token_b = secrets.token_hex(32), secrets.token_hex(32)
    port = free_port()
    serve = launch(
        executor,
        [python, "-I", "-S", str(rexec), "serve"],
        run_as=bob,
        job=2,
        env={
            "GPUYARD_JOB_TOKEN": token_b,
            "GPUYARD_REXEC_ADDRESS": "127.0.0.1",
            "GPUYARD_REXEC_PORT": str(port),
        },
    )
    wait_log(executor, serve, "rexec: listening on")
    hosts = base / "hosts.json"
    hosts.write_text(json.dumps({"b": {"address": "127.0.0.1", "port": port}}))
    hosts.chmod(0o644)
    agent = [python, "-I", "-S", str(rexec), "agent", "b", "id", "-u"]
    # With bob's job's token, from anywhere (here: root): bob's shell, not root's.
    own = subprocess.run(
        agent,
        env={**ENV, "GPUYARD_JOB_TOKEN": token_b, "GPUYARD_REXEC_HOSTS": str(hosts)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (own.returncode, own.stdout) == (0, f"{entry.pw_uid}\n"), own.stderr
    # Alice's job, holding its own token, tries bob's job, and bob's token in /proc.
    serve_pid = command_pid(serve)
    script = (
        f"GPUYARD_REXEC_HOSTS={hosts} {' '.join(agent)}; echo exit=$?; "
        f"GPUYARD_JOB_TOKEN={'0' * 64} GPUYARD_REXEC_HOSTS={hosts} {' '.join(agent)}; "
        "echo exit=$?; "
        f"cat /proc/{serve_pid}/environ >/dev/null 2>&1 && echo environ-read "
        "|| echo environ-denied; "
        f"grep -c {token_b} /proc/*/environ 2>/dev/null | grep -v ':0$' || echo token-not-found"
    )
    handle = launch(executor, script, run_as=alice, env={"GPUYARD_JOB_TOKEN": token_a})
    assert wait_exit(executor, handle, timeout=60)[0] == 0
    text = log(executor, handle)
    assert text.count("authentication failed: bad token") == 2, text
    assert text.count("exit=255") == 2
    assert str(entry.pw_uid) not in text.splitlines()  # no command ran as bob
    assert "environ-denied" in text and "token-not-found" in text
    assert token_b not in text
    [status] = executor.status([serve])
    assert status.state is WorkerState.RUNNING  # the refusals did not hurt bob's job


def test_a_pool_that_cannot_switch_users_refuses_another_account(
    executor: LocalExecutor, account: Account
) -> None:
    executor.switch_users = False  # what a pool that is not run by root finds
    with pytest.raises(LaunchError, match="only a pool run by root can switch users"):
        launch(executor, "id", run_as=account("n"))


def test_a_program_the_account_cannot_reach_fails_saying_what_to_do_as_the_submission_rule_says(
    executor: LocalExecutor, account: Account, base: Path
) -> None:
    # The kernel's verdict at launch and the rule the submission checks first
    # (gpuyard.launch.program) agree, on real files and a real account.
    from gpuyard.launch.program import blocked_at, chain_of
    from gpuyard.services.program_check import lookup_account, path_facts

    name = account("x")
    for where, mode in (("closed", 0o700), ("open", 0o755)):
        (base / where).mkdir(mode=mode)
        (base / where).chmod(mode)
        shutil.copy("/bin/true", base / where / "prog")
    code, why = wait_exit(executor, launch(executor, [str(base / "closed/prog")], run_as=name))
    assert code == 126
    assert why.startswith(f"cannot execute '{base}/closed/prog' as '{name}': Permission denied")
    assert "install it into a path other accounts can read and search" in why
    code, _ = wait_exit(executor, launch(executor, [str(base / "open/prog")], run_as=name, job=2))
    assert code == 0
    made = lookup_account(name)  # the launch made it: its own uid and group now
    assert made.uid is not None
    for where, refused in (("closed", True), ("open", False)):
        chain = path_facts(chain_of(f"{base}/{where}/prog"))
        assert chain is not None
        assert (blocked_at(chain, made) is not None) is refused
