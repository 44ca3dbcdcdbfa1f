"""A job cannot change what the pool believes about its worker's life, nor make the executor
signal a process that is not the worker's.

The forger below runs as the worker, as the pool's own user (as jobs do today): it finds its
supervisor's files by scanning the pool's home, writes a fake exit record and a fake state
pointing at an innocent process (with that process's true start time), deletes lock files,
writes the old ``../exit.json`` next to its control dir, and registers the innocent process as
a notice listener. Then it runs until told to stop, and exits 7.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from gpuyard.executors.local import cgroups, procfs
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.models.worker import (
    Handle,
    Notice,
    WorkerKey,
    WorkerLaunch,
    WorkerState,
)
from gpuyard.testing.waits import first_ended, wait_until
from gpuyard.testing.waits import whole_log as log

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}

FORGER = r"""
import json, os, pathlib, signal, sys, time

victim = int(sys.argv[1])
again = sys.argv[2] == "again"
control = pathlib.Path(os.environ["GPUYARD_CONTROL_DIR"])
home = control.parents[5]  # control, worker-0, 0, attempts, <job>, jobs
stat = open(f"/proc/{victim}/stat").read()
start = int(stat[stat.rindex(")") + 2:].split()[19])
boot = open("/proc/sys/kernel/random/boot_id").read().strip()
fake_exit = {"exit_code": 0, "signal": None, "terminated": False, "escalated": False,
             "started_at": 1.0, "finished_at": 2.0}
fake_state = {"supervisor_pid": victim, "supervisor_start_time": start, "boot_id": boot,
              "pid": victim, "pgid": victim, "started_at": 1.0, "workspace": ""}

def forge():
    (control.parent / "exit.json").write_text(json.dumps(fake_exit))
    (control.parent / "state.json").write_text(json.dumps(fake_state))
    for found in list(home.rglob("*")):
        if found.name in ("lock", "state.json", "spec.json"):
            found.unlink(missing_ok=True)
        if found.name in ("state.json", "spec.json", "supervisor.err"):
            (found.parent / "exit.json").write_text(json.dumps(fake_exit))
            (found.parent / "state.json").write_text(json.dumps(fake_state))
            (found.parent / "lock").write_text("")

forge()
(control / "listeners").mkdir(exist_ok=True)
(control / "listeners" / str(victim)).touch()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("forged", flush=True)
while True:
    time.sleep(0.01)
    if again:
        forge()
"""


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """An innocent process, in a session and group of its own, outside every worker."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture(params=["cgroup", "cgroup-v2-unified", "none"])
def isolated(
    request: pytest.FixtureRequest, make_executor: Callable[..., LocalExecutor]
) -> LocalExecutor:
    """An executor for each kind of isolation this machine can give."""
    if request.param == "none":
        return make_executor(isolation=cgroups.Isolation(cgroups.NONE))
    if request.param == "cgroup":
        request.getfixturevalue("needs_cgroup")
        return make_executor()
    return make_executor(isolation=request.getfixturevalue("unified_isolation"))


def launch_forger(ex: LocalExecutor, victim: int, *, again: bool = False) -> Handle:
    argv = [sys.executable, "-c", FORGER, str(victim), "again" if again else "once"]
    handle = ex.launch(WorkerLaunch(WorkerKey(1, 0, 0), "local", argv, ENV, "/", 30.0))
    wait_until(lambda: "forged" in log(ex, handle))
    return handle


def wait_ended(ex: LocalExecutor, handle: Handle) -> None:
    wait_until(lambda: ex.status([handle])[0].state is not WorkerState.RUNNING)


def test_forged_files_change_nothing_and_no_forged_pid_is_signalled(
    isolated: LocalExecutor, victim: subprocess.Popen[bytes]
) -> None:
    ex = isolated
    handle = launch_forger(ex, victim.pid, again=True)
    for _ in range(10):
        assert ex.status([handle])[0].state is WorkerState.RUNNING
        time.sleep(0.02)
    ex.notify(handle, Notice(requested_at=1.0, deadline=2.0, reason="test", by="test"))
    ex.terminate(handle, grace=5)
    wait_ended(ex, handle)
    [status] = ex.status([handle])
    assert (status.state, status.exit_code, status.signal) == (WorkerState.EXITED, 7, None)
    ex.kill(handle)
    ex.terminate(handle, grace=0)
    time.sleep(0.1)
    assert victim.poll() is None  # never signalled: not SIGUSR1, SIGTERM nor SIGKILL


@pytest.mark.parametrize("how", ["kill", "escalation"])
def test_the_kill_never_reaches_a_forged_group(
    isolated: LocalExecutor,
    victim: subprocess.Popen[bytes],
    how: str,
    worker_processes: Callable[[Path], list[psutil.Process]],
) -> None:
    ex = isolated
    handle = launch_forger(ex, victim.pid)
    if how == "kill":
        ex.kill(handle)
    else:  # the forger exits on SIGTERM, so hold it off: SIGSTOP keeps it from running
        for proc in worker_processes(Path(handle["dir"])):
            proc.suspend()
        ex.terminate(handle, grace=0.2)
    wait_ended(ex, handle)
    [status] = ex.status([handle])
    assert (status.state, status.exit_code, status.signal) == (WorkerState.EXITED, 137, "SIGKILL")
    assert victim.poll() is None


def test_a_dead_supervisor_is_not_outlived_by_a_forged_exit_record(
    isolated: LocalExecutor,
    victim: subprocess.Popen[bytes],
    worker_processes: Callable[[Path], list[psutil.Process]],
) -> None:
    """The forger keeps writing a fake exit record after its supervisor was SIGKILLed."""
    ex = isolated
    handle = launch_forger(ex, victim.pid, again=True)
    identity = procfs.Identity.from_handle(handle)
    assert identity is not None
    os.kill(identity.pid, signal.SIGKILL)
    status = first_ended(ex, handle)  # the first answer is the one the controller records
    if ex.isolation.mode == cgroups.NONE:
        # Without a cgroup the executor cannot tell a forged record from a true one (the
        # warning says so), but it still kills every process of the worker.
        assert status.state in (WorkerState.EXITED, WorkerState.LOST)
    else:
        assert status.state is WorkerState.LOST
        assert "1 process of the worker killed" in status.message  # the forger
        time.sleep(0.1)  # and it stays lost: nothing of the job is left to write a record
        assert ex.status([handle])[0].state is WorkerState.LOST
    wait_until(lambda: not worker_processes(Path(handle["dir"])))
    assert victim.poll() is None


def test_a_restarted_executor_trusts_the_handle_not_the_files(
    isolated: LocalExecutor, victim: subprocess.Popen[bytes]
) -> None:
    ex = isolated
    handle = launch_forger(ex, victim.pid, again=True)
    successor = LocalExecutor(ex.home, isolation=ex.isolation)
    assert successor.status([json.loads(json.dumps(handle))])[0].state is WorkerState.RUNNING
    # A retried launch (the handle never reached the store) finds the real supervisor, not
    # the pid the forged state names.
    again = successor.launch(WorkerLaunch(WorkerKey(1, 0, 0), "local", ["true"], ENV, "/", 5.0))
    assert (again["pid"], again["start_time"]) == (handle["pid"], handle["start_time"])
    successor.terminate(again, grace=5)
    wait_ended(successor, again)
    assert successor.status([again])[0].exit_code == 7
    assert victim.poll() is None
