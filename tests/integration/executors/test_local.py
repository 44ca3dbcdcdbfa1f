"""The local executor and its supervisors, with real processes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuyard.executors.local import cgroups
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.machine import GpuDevice, Machine
from gpuyard.models.worker import (
    Bind,
    File,
    Handle,
    WorkerKey,
    WorkerLaunch,
    WorkerState,
    WorkerStatus,
)
from gpuyard.testing.waits import whole_log as log

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
NO_CGROUPS = cgroups.Isolation(cgroups.NONE)


def launch(
    ex: LocalExecutor,
    argv: list[str],
    *,
    job: int = 1,
    rank: int = 0,
    grace: float = 5.0,
    cwd: str = "/",
    env: dict[str, str] | None = None,
) -> Handle:
    return ex.launch(
        WorkerLaunch(WorkerKey(job, 0, rank), "local", argv, {**ENV, **(env or {})}, cwd, grace)
    )


def wait_for(
    ex: LocalExecutor,
    handle: Handle,
    phase: WorkerState = WorkerState.EXITED,
    timeout: float = 20,
) -> WorkerStatus:
    deadline = time.monotonic() + timeout
    while True:
        [status] = ex.status([handle])
        if status.state is phase:
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"worker still {status.state} after {timeout}s")
        time.sleep(0.02)


def state(handle: Handle) -> dict[str, Any]:
    """The supervisor's state.json once the command runs."""
    path = Path(handle["supervisor"]) / "state.json"
    wait_until(lambda: path.exists() and "pid" in json.loads(path.read_text()))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_runs_the_command_with_its_env_and_cwd_and_keeps_the_log(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    script = "import os, sys; print(os.getcwd(), os.environ['X']); print('err', file=sys.stderr)"
    handle = launch(
        executor, [sys.executable, "-u", "-c", script], cwd=str(tmp_path), env={"X": "42"}
    )
    status = wait_for(executor, handle)
    assert (status.exit_code, status.signal, status.escalated) == (0, None, False)
    assert log(executor, handle) == f"{tmp_path} 42\nerr\n"
    job_dir = Path(executor.job_dir(1))
    assert (job_dir / "outputs").is_dir() and (job_dir / "checkpoints").is_dir()


def test_exit_codes_and_signals_are_recorded(executor: LocalExecutor) -> None:
    assert wait_for(executor, launch(executor, ["sh", "-c", "exit 3"])).exit_code == 3
    status = wait_for(executor, launch(executor, ["sh", "-c", "kill -SEGV $$"], rank=1))
    assert (status.exit_code, status.signal) == (128 + signal.SIGSEGV, "SIGSEGV")


@pytest.mark.parametrize(
    ("argv", "cwd", "message", "code"),
    [
        (["no-such-command-xyz"], "/", "'no-such-command-xyz': command not found", 127),
        (["true"], "/no/such/dir", "working directory '/no/such/dir' does not exist", 127),
        (["/etc/hostname"], "/", "cannot execute '/etc/hostname'", 126),
    ],
)
def test_a_command_that_cannot_start_says_why(
    executor: LocalExecutor, argv: list[str], cwd: str, message: str, code: int
) -> None:
    handle = launch(executor, argv, cwd=cwd)
    status = wait_for(executor, handle)
    assert status.exit_code == code
    assert message in status.message
    assert message in log(executor, handle)


def test_terminate_gives_the_graceful_period_then_sigkill(executor: LocalExecutor) -> None:
    trap = 'trap "echo got TERM" TERM; echo ready; while true; do sleep 0.05; done'
    handle = launch(executor, ["bash", "-c", trap], grace=60)
    wait_until(lambda: "ready" in log(executor, handle))
    started = time.monotonic()
    executor.terminate(handle, grace=0.5)  # the override wins over the spec's 60 s
    status = wait_for(executor, handle)
    assert 0.4 < time.monotonic() - started < 10
    assert (status.exit_code, status.signal, status.escalated) == (137, "SIGKILL", True)
    assert "got TERM" in log(executor, handle)


def test_terminate_of_a_cooperative_command_needs_no_sigkill(executor: LocalExecutor) -> None:
    handle = launch(executor, ["sleep", "60"], grace=30)
    state(handle)
    executor.terminate(handle, grace=30)
    status = wait_for(executor, handle, timeout=5)
    assert (status.exit_code, status.signal, status.escalated) == (143, "SIGTERM", False)


def test_launching_the_same_worker_twice_starts_it_once(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    marker = tmp_path / "runs"
    argv = ["sh", "-c", f"echo $$ >> {marker}; sleep 0.5"]
    first = launch(executor, argv)
    again = launch(executor, argv)
    successor = LocalExecutor(executor.home)  # a restarted control plane retries the launch
    third = launch(successor, argv)
    assert again["dir"] == first["dir"] == third["dir"]
    wait_for(executor, first)
    wait_for(successor, third)
    assert len(marker.read_text().split()) == 1


def test_a_new_executor_sees_workers_it_did_not_launch(executor: LocalExecutor) -> None:
    handle = launch(executor, ["sleep", "0.5"])
    successor = LocalExecutor(executor.home, isolation=executor.isolation)
    assert successor.status([handle])[0].state is WorkerState.RUNNING
    assert wait_for(successor, handle).exit_code == 0


def test_what_the_command_leaves_in_its_group_is_killed_at_exit(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    pidfile = tmp_path / "bg.pid"
    handle = launch(executor, ["bash", "-c", f"sleep 300 & echo $! > {pidfile}; exit 0"])
    assert wait_for(executor, handle).exit_code == 0
    pid = int(pidfile.read_text())
    wait_until(lambda: not _running(pid))


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "no-cgroup"])
def test_a_supervisor_killed_with_its_worker_alive_is_lost_and_its_processes_killed(
    make_executor: Callable[..., LocalExecutor], isolation_reason: str, cgroup: bool
) -> None:
    if cgroup and isolation_reason:
        pytest.skip(f"no writable cgroup on this machine: {isolation_reason}")
    executor = make_executor(isolation=None if cgroup else NO_CGROUPS)
    handle = launch(executor, ["sleep", "300"])
    info = state(handle)
    assert executor.status([handle])[0].state is WorkerState.RUNNING
    os.kill(info["supervisor_pid"], signal.SIGKILL)
    status = wait_for(executor, handle, WorkerState.LOST)
    assert "supervisor ended without recording an exit" in status.message
    assert "1 process of the worker killed" in status.message
    wait_until(lambda: not _running(info["pid"]))  # before the LOST was reported, in fact


def test_workers_outlive_the_process_that_launched_them(
    tmp_path: Path, make_executor: Callable[..., LocalExecutor]
) -> None:
    """A control plane killed with SIGKILL, process group and all, leaves its workers running."""
    home = tmp_path / "home"
    code = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from gpuyard.models.worker import WorkerKey, WorkerLaunch
        from gpuyard.executors.local.executor import LocalExecutor
        ex = LocalExecutor(Path({str(home)!r}))
        ex.launch(WorkerLaunch(WorkerKey(1, 0, 0), "local", ["sh", "-c", "sleep 1; echo done"],
                               {{"PATH": os.environ["PATH"]}}, "/", 5.0))
        print("launched", flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    assert parent.stdout is not None
    assert parent.stdout.readline().strip() == b"launched"
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait()
    successor = make_executor(home)
    # The handle never reached a store: a retried launch returns the running worker's.
    handle = successor.launch(
        WorkerLaunch(WorkerKey(1, 0, 0), "local", ["false"], {"PATH": os.environ["PATH"]}, "/", 5.0)
    )
    assert successor.status([handle])[0].state is WorkerState.RUNNING
    assert wait_for(successor, handle).exit_code == 0
    assert log(successor, handle) == "done\n"


def test_supervisors_poke_the_executor_on_start_and_exit_naming_the_worker(
    executor: LocalExecutor,
) -> None:
    pokes: queue.Queue[WorkerKey | None] = queue.Queue()
    executor.set_wakeup(pokes.put)
    handle = launch(executor, ["true"], job=4, rank=2)
    assert pokes.get(timeout=10) == WorkerKey(4, 0, 2)  # started
    assert pokes.get(timeout=10) == WorkerKey(4, 0, 2)  # exited
    # Called back once the supervisor is gone: status believes the exit at once.
    assert executor.status([handle])[0].state is WorkerState.EXITED


def test_a_poke_from_anyone_but_the_supervisor_is_dropped(executor: LocalExecutor) -> None:
    pokes: queue.Queue[WorkerKey | None] = queue.Queue()
    executor.set_wakeup(pokes.put)
    handle = launch(executor, ["sleep", "30"], job=5)
    assert pokes.get(timeout=10) == WorkerKey(5, 0, 0)  # started
    forge = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
        "s.sendto(sys.argv[2].encode(), '\\0' + sys.argv[1])"
    )
    for event in ("exited", "started"):
        for job in (5, 6):  # a worker the executor knows, and one it does not
            poke = json.dumps({"event": event, "job": job, "attempt": 0, "rank": 0})
            name = f"gpuyard-{executor._name.removeprefix('gpuyard-')}"
            subprocess.run([sys.executable, "-c", forge, name, poke], check=True)
    with pytest.raises(queue.Empty):
        pokes.get(timeout=0.5)
    assert executor.status([handle])[0].state is WorkerState.RUNNING


def test_virtual_nodes_split_the_machine() -> None:
    gpus = tuple(GpuDevice(i, "NVIDIA H100", f"GPU-{i}") for i in range(4))
    machine = Machine("box", cpus=16, memory=64 << 30, gpus=gpus, driver_version="550.1")
    real = LocalExecutor(
        Path("/unused"), virtual_nodes=2, machine=machine, isolation=NO_CGROUPS
    ).nodes()
    assert [(n.name, n.address, n.gpus, n.gpu_devices, n.cpus, n.memory) for n in real] == [
        ("node0", "127.0.0.2", 2, ("0", "1"), 8.0, 32 << 30),
        ("node1", "127.0.0.3", 2, ("2", "3"), 8.0, 32 << 30),
    ]
    assert real[0].labels["gpu.kind"] == "nvidia" and real[0].labels["driver"] == "550.1"
    assert real[0].labels["isolation"] == "none"
    virtual = LocalExecutor(
        Path("/unused"), virtual_nodes=3, gpus_per_node=4, machine=machine, isolation=NO_CGROUPS
    )
    assert [n.gpu_model for n in virtual.nodes()] == ["virtual"] * 3
    assert virtual.nodes()[2].address == "127.0.0.4"
    whole = LocalExecutor(Path("/unused"), machine=machine, isolation=NO_CGROUPS).nodes()
    assert [(n.name, n.address, n.gpus, n.gpu_model) for n in whole] == [
        ("box", "127.0.0.1", 4, "NVIDIA H100")
    ]


def wait_until(predicate: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_workspace_is_bound_read_only_where_asked(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    (data / "train.txt").write_text("42\n")
    ws = tmp_path / "ws"
    script = (
        f"cat {ws}/dataset/d/train.txt; "
        f"touch {ws}/dataset/d/new 2>/dev/null && echo dataset-writable || echo dataset-read-only; "
        f"touch {ws}/outputs/result && echo outputs-writable"
    )
    handle = executor.launch(
        WorkerLaunch(
            WorkerKey(7, 0, 0),
            "local",
            ["sh", "-c", script],
            ENV,
            "/",
            5.0,
            binds=[
                Bind(f"{ws}/dataset/d", str(data), True),
                Bind(f"{ws}/outputs", str(out), False),
            ],
        )
    )
    assert wait_for(executor, handle).exit_code == 0
    mode = json.loads((Path(handle["supervisor"]) / "state.json").read_text())["workspace"]
    text = log(executor, handle)
    assert text.startswith("42\n") and "outputs-writable" in text
    assert (out / "result").exists()  # the output directory was created and written through
    if mode == "bind":  # root (or CAP_SYS_ADMIN): read-only is enforced
        assert "dataset-read-only" in text
        assert not (data / "new").exists()
    else:  # links: the same tree, but the OS cannot make a link read-only
        assert mode == "link"


def test_a_missing_read_only_source_fails_with_a_clear_message(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    handle = executor.launch(
        WorkerLaunch(
            WorkerKey(8, 0, 0),
            "local",
            ["true"],
            ENV,
            "/",
            5.0,
            binds=[Bind(f"{tmp_path}/ws/dataset/d", "/no/such/data", True)],
        )
    )
    status = wait_for(executor, handle)
    assert status.exit_code == 127
    assert "the directory to mount, '/no/such/data', does not exist" in status.message


def test_files_are_written_with_their_modes(executor: LocalExecutor, tmp_path: Path) -> None:
    script = tmp_path / "job" / "run.sh"
    handle = executor.launch(
        WorkerLaunch(
            WorkerKey(9, 0, 0),
            "local",
            [str(script)],
            ENV,
            "/",
            5.0,
            files={str(script): File("#!/bin/sh\necho from a file\n", 0o755)},
        )
    )
    assert wait_for(executor, handle).exit_code == 0
    assert log(executor, handle) == "from a file\n"


RUNTIME_JOB = """
import time
import gpuyard.runtime as gr
gr.preemption_requested()  # installs the handler, registers listeners/<pid>
gr.report_progress(3, loss=float("nan"))
gr.record_checkpoint("/ckpt/checkpoint.pt", step=3)
print("ready", flush=True)
while not gr.preemption_requested():
    time.sleep(0.01)
print("notice:", gr.preemption_notice().source, flush=True)
gr.acknowledge()
gr.suspend()
"""


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "no-cgroup"])
def test_the_runtime_and_the_executor_agree_on_the_control_files(
    make_executor: Callable[..., LocalExecutor], isolation_reason: str, cgroup: bool
) -> None:
    if cgroup and isolation_reason:
        pytest.skip(f"no writable cgroup on this machine: {isolation_reason}")
    from gpuyard.models.worker import Notice

    executor = make_executor(isolation=None if cgroup else NO_CGROUPS)
    handle = launch(executor, [sys.executable, "-c", RUNTIME_JOB])
    wait_until(lambda: "ready" in log(executor, handle))
    [before] = executor.control([handle])
    assert (before.listening, before.step, before.checkpoint_step, before.invalid) == (
        True,
        3,
        3,
        (),
    )
    executor.notify(
        handle, Notice(requested_at=time.time(), deadline=time.time() + 60, reason="t", by="t")
    )
    status = wait_for(executor, handle)
    assert status.exit_code == 75
    assert "notice: signal" in log(executor, handle)  # the signal reached the registered pid
    [after] = executor.control([handle])
    assert after.acknowledged_at is not None and after.suspended_at is not None
    assert after.invalid == ()


def test_a_volume_that_cannot_be_made_fails_at_once_with_a_clear_message(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    handle = executor.launch(
        WorkerLaunch(
            WorkerKey(10, 0, 0),
            "local",
            ["true"],
            ENV,
            "/",
            5.0,
            binds=[Bind(f"{tmp_path}/ws/volume/v", f"{blocker}/v", False)],
        )
    )
    status = wait_for(executor, handle, timeout=10)
    assert status.exit_code == 126
    assert status.message == (
        f"cannot create the directory to mount, '{blocker}/v': Not a directory"
    )
