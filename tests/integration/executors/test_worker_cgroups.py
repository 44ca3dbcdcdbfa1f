"""Each worker in a cgroup of its own: limits, OOM kills reported, and nothing of a worker left
once it has ended, however its processes tried to leave."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from gpuyard.executors.local import cgroups, procfs
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.models.node import IsolationMode, NodeIsolation
from gpuyard.models.resources import Resources
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState
from gpuyard.testing.waits import first_ended as ended
from gpuyard.testing.waits import wait_until
from gpuyard.testing.waits import whole_log as log

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
NO_LIMITS = Resources()
WorkerProcesses = Callable[[Path], list[psutil.Process]]

# Children that leave the worker's process group: a setsid'd sleeper, a double fork (its
# parent exits, so it is reparented), and a Python daemon that does both.
ESCAPERS = """
setsid sleep 1000 &
(sleep 1000 &) &
python3 -c 'import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(1000)
' &
sleep 0.3
echo ready
"""


@pytest.fixture(params=["cgroup", "cgroup-v2-unified", "none"])
def isolated(
    request: pytest.FixtureRequest, make_executor: Callable[..., LocalExecutor]
) -> LocalExecutor:
    if request.param == "none":
        return make_executor(isolation=cgroups.Isolation(cgroups.NONE))
    if request.param == "cgroup":
        request.getfixturevalue("needs_cgroup")
        return make_executor()
    return make_executor(isolation=request.getfixturevalue("unified_isolation"))


def launch(
    ex: LocalExecutor,
    argv: list[str],
    *,
    limits: Resources = NO_LIMITS,
    grace: float = 5.0,
) -> Handle:
    return ex.launch(
        WorkerLaunch(WorkerKey(1, 0, 0), "local", argv, ENV, "/", grace, limits=limits)
    )


@pytest.mark.parametrize("end", ["command exits", "terminate", "kill"])
def test_nothing_of_a_worker_outlives_it(
    isolated: LocalExecutor, worker_processes: WorkerProcesses, end: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    if end == "command exits":
        script = ESCAPERS + f"while [ ! -e {go} ]; do sleep 0.02; done; exit 3"
    else:
        script = ESCAPERS + "trap '' TERM; sleep 1000"
    handle = launch(isolated, ["bash", "-c", script], grace=0.3)
    wait_until(lambda: "ready" in log(isolated, handle))
    wait_until(lambda: len(worker_processes(Path(handle["dir"]))) >= 4)  # and its 3 escapers
    if end == "command exits":
        go.touch()
    elif end == "terminate":
        isolated.terminate(handle, grace=0.3)
    elif end == "kill":
        isolated.kill(handle)
    status = ended(isolated, handle)
    expected = {
        "command exits": (3, None, False),
        "terminate": (137, "SIGKILL", True),
        "kill": (137, "SIGKILL", False),
    }
    assert (status.exit_code, status.signal, status.escalated) == expected[end]
    assert status.state is WorkerState.EXITED
    # Without a cgroup, the escapers survive the supervisor; the executor kills them when it
    # reports the end (those that keep the worker's environment).
    assert worker_processes(Path(handle["dir"])) == []


def test_the_command_runs_in_its_cgroup_from_the_start(isolated: LocalExecutor) -> None:
    handle = launch(isolated, ["cat", "/proc/self/cgroup"])
    assert ended(isolated, handle).exit_code == 0
    lines = log(isolated, handle).splitlines()
    if isolated.isolation.mode == cgroups.NONE:
        assert not any(line.endswith("/1-0-0") for line in lines)
        return
    cgroup = cgroups.Cgroup.from_json(handle["cgroup"])
    assert cgroup is not None
    for controller in cgroup.dirs:
        name = "" if controller == "unified" else controller
        [line] = [x for x in lines if name in x.split(":")[1].split(",")]
        parent = Path(isolated.isolation.parents[controller]).name
        assert line.endswith(f"/{parent}/1-0-0"), line
    assert not cgroup.exists()  # removed once the worker ended


def test_a_worker_past_its_memory_limit_ends_out_of_memory(
    make_executor: Callable[..., LocalExecutor], needs_cgroup: None
) -> None:
    ex = make_executor()
    code = "x = bytearray(300 << 20); print('survived')"
    handle = launch(ex, [sys.executable, "-c", code], limits=Resources(memory=64 << 20))
    status = ended(ex, handle)
    assert (status.exit_code, status.signal) == (137, "SIGKILL")
    assert status.cause == "out of memory: limit 64Mi"
    assert "survived" not in log(ex, handle)


def test_a_worker_within_its_memory_limit_is_not_killed(
    make_executor: Callable[..., LocalExecutor], needs_cgroup: None
) -> None:
    ex = make_executor()
    code = "x = bytearray(20 << 20); print('survived')"
    handle = launch(ex, [sys.executable, "-c", code], limits=Resources(memory=256 << 20))
    status = ended(ex, handle)
    assert (status.exit_code, status.cause) == (0, "")


def test_a_fork_bomb_stops_at_the_process_limit(
    make_executor: Callable[..., LocalExecutor], needs_cgroup: None
) -> None:
    ex = make_executor(pids_limit=20)
    if "pids" not in ex.isolation.controllers:
        pytest.skip("the pids controller is not available here")
    handle = launch(ex, ["bash", "-c", "for i in $(seq 40); do sleep 2 & done; wait; exit 1"])
    status = ended(ex, handle)
    assert status.cause == "reached its limit of 20 processes (a fork failed)"


def test_cpu_limits_are_written(
    make_executor: Callable[..., LocalExecutor], needs_cgroup: None
) -> None:
    ex = make_executor()
    if "cpu" not in ex.isolation.controllers:
        pytest.skip("the cpu controller is not available here")
    handle = launch(ex, ["sleep", "30"], limits=Resources.of(cpus=0.5))
    cgroup = cgroups.Cgroup.from_json(handle["cgroup"])
    assert cgroup is not None
    wait_until(lambda: bool(cgroup.procs()))
    if cgroup.version == 2:
        assert Path(cgroup.dirs["unified"], "cpu.max").read_text().split() == ["50000", "100000"]
    else:
        assert Path(cgroup.dirs["cpu"], "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert Path(cgroup.dirs["cpu"], "cpu.shares").read_text().strip() == "512"
    ex.kill(handle)
    assert ended(ex, handle).signal == "SIGKILL"


def test_a_lost_workers_cgroup_is_emptied_and_removed(
    make_executor: Callable[..., LocalExecutor],
    needs_cgroup: None,
    worker_processes: WorkerProcesses,
) -> None:
    ex = make_executor()
    handle = launch(ex, ["bash", "-c", ESCAPERS + "sleep 1000"])
    wait_until(lambda: "ready" in log(ex, handle))
    identity = procfs.Identity.from_handle(handle)
    assert identity is not None
    os.kill(identity.pid, signal.SIGKILL)
    status = ended(ex, handle)
    assert status.state is WorkerState.LOST
    assert "processes of the worker killed" in status.message
    assert worker_processes(Path(handle["dir"])) == []
    cgroup = cgroups.Cgroup.from_json(handle["cgroup"])
    assert cgroup is not None and not cgroup.exists()


def test_the_executor_says_what_it_enforces(
    make_executor: Callable[..., LocalExecutor], isolation_reason: str
) -> None:
    bare = make_executor(isolation=cgroups.Isolation(cgroups.NONE, warnings=["no cgroup here"]))
    assert bare.warnings() == ["no cgroup here"]
    assert {n.labels["isolation"] for n in bare.nodes()} == {"none"}
    found = make_executor()
    assert {n.labels["isolation"] for n in found.nodes()} == {found.isolation.mode}
    if isolation_reason:
        assert found.isolation.mode == cgroups.NONE and found.warnings()
    else:
        assert found.isolation.mode in (cgroups.CGROUP_V1, cgroups.CGROUP_V2)
    assert bare.enforced() == NodeIsolation(mode=IsolationMode.NONE)
    report = found.enforced()
    nodes = found.nodes()
    assert [NodeIsolation.from_labels(dict(n.labels)) for n in nodes] == [report] * len(nodes)
    wanted = ("memory", "pids", "cpu")
    assert report.enforced == [c for c in wanted if c in found.isolation.controllers]
    assert report.pids_ceiling == (found.pids_ceiling if "pids" in report.enforced else 0)


HIDER = r"""
import os, sys, time
inner = os.path.join(sys.argv[1], "hidden")
os.mkdir(inner)
if os.fork() == 0:
    with open(os.path.join(inner, "cgroup.procs"), "w") as procs:
        procs.write("0")
    print("hidden", flush=True)
    time.sleep(1000)
time.sleep(1000)
"""


@pytest.mark.parametrize("end", ["terminate", "kill"])
def test_a_process_in_a_cgroup_the_job_made_inside_its_own_is_killed_too(
    isolated: LocalExecutor, worker_processes: WorkerProcesses, end: str
) -> None:
    if isolated.isolation.mode == cgroups.NONE:
        pytest.skip("no cgroup to make one inside")
    expected = isolated.isolation.cgroup("1-0-0", memory=0, mcpus=0, pids=0)
    assert expected is not None
    handle = launch(isolated, [sys.executable, "-c", HIDER, expected.main], grace=0.2)
    wait_until(lambda: "hidden" in log(isolated, handle))
    if end == "kill":
        isolated.kill(handle)
    else:
        isolated.terminate(handle, grace=0.2)
    assert ended(isolated, handle).signal in ("SIGKILL", "SIGTERM")
    assert worker_processes(Path(handle["dir"])) == []
    assert not os.path.exists(expected.main)


def test_the_pools_cgroup_lives_while_it_has_workers(
    make_executor: Callable[..., LocalExecutor], needs_cgroup: None
) -> None:
    ex = make_executor()
    parents = list(ex.isolation.parents.values())
    assert not any(os.path.exists(p) for p in parents)  # made by the first worker
    second = ex.launch(WorkerLaunch(WorkerKey(1, 0, 1), "local", ["sleep", "30"], ENV, "/", 5.0))
    cgroup = cgroups.Cgroup.from_json(second["cgroup"])
    assert cgroup is not None
    wait_until(lambda: bool(cgroup.procs()))
    first = ex.launch(WorkerLaunch(WorkerKey(1, 0, 0), "local", ["true"], ENV, "/", 5.0))
    assert ended(ex, first).exit_code == 0
    assert all(os.path.isdir(p) for p in parents)  # the other worker is still in it
    ex.kill(second)
    assert ended(ex, second).signal == "SIGKILL"
    assert not any(os.path.exists(p) for p in parents)  # nothing left behind a stopped pool
    code = "x = bytearray(300 << 20)"
    again = ex.launch(
        WorkerLaunch(
            WorkerKey(2, 0, 0),
            "local",
            [sys.executable, "-c", code],
            ENV,
            "/",
            5.0,
            limits=Resources(memory=64 << 20),
        )
    )
    assert ended(ex, again).cause == "out of memory: limit 64Mi"


@pytest.fixture
def frozen_cgroup() -> Iterator[Path]:
    """A cgroup v1 freezer cgroup of the test's own: a process frozen in it takes a SIGKILL
    but cannot end until it is thawed, which makes "signalled, not yet dead" last."""
    own = cgroups._own_cgroups("/proc/self/cgroup").get("freezer")
    mount = next((m for m in cgroups._mounts("/proc/self/mountinfo") if "freezer" in m[3]), None)
    base = None if own is None or mount is None else cgroups._own_dir(mount[1], mount[0], own)
    if base is None or not os.access(base, os.W_OK):
        pytest.skip("no writable cgroup v1 freezer here")
    path = Path(base, f"gpuyard-test-{uuid.uuid4().hex[:8]}")
    path.mkdir()
    yield path
    (path / "freezer.state").write_text("THAWED")
    for pid in (path / "cgroup.procs").read_text().split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    wait_until(lambda: not (path / "cgroup.procs").read_text().split(), timeout=30)
    path.rmdir()


def _sigkill_pending(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone: it was signalled
    masks = [line.split()[1] for line in status.splitlines() if line[:6] in ("SigPnd", "ShdPnd")]
    return any(int(mask, 16) & (1 << (signal.SIGKILL - 1)) for mask in masks)


def test_a_kill_without_a_cgroup_returns_once_the_processes_have_ended(
    make_executor: Callable[..., LocalExecutor],
    worker_processes: WorkerProcesses,
    frozen_cgroup: Path,
) -> None:
    """The race behind the flaky ``test_nothing_of_a_worker_outlives_it[none-terminate]``: a
    SIGKILL takes effect only when its target next runs, so a kill that returns as soon as it
    has signalled leaves, on a loaded machine, processes that still run. Here the escaper is
    frozen, so it cannot end before it is thawed: ``kill`` must not return until then."""
    ex = make_executor(isolation=cgroups.Isolation(cgroups.NONE))
    handle = launch(ex, ["bash", "-c", "setsid sleep 1000 & echo ready; wait"])
    wait_until(lambda: "ready" in log(ex, handle), timeout=30)
    wait_until(
        lambda: any(p.name() == "sleep" for p in worker_processes(Path(handle["dir"]))),
        timeout=30,
    )
    [escaper] = [p for p in worker_processes(Path(handle["dir"])) if p.name() == "sleep"]
    (frozen_cgroup / "cgroup.procs").write_text(str(escaper.pid))
    (frozen_cgroup / "freezer.state").write_text("FROZEN")
    wait_until(lambda: (frozen_cgroup / "freezer.state").read_text().strip() == "FROZEN", 30)
    alive_when_kill_returned: list[bool] = []

    def kill() -> None:
        ex.kill(handle)
        alive_when_kill_returned.append(escaper.is_running() and escaper.status() != "zombie")

    killer = threading.Thread(target=kill)
    killer.start()
    wait_until(lambda: _sigkill_pending(escaper.pid), timeout=30)
    killer.join(timeout=2)  # the old kill returned here, with the escaper still frozen
    (frozen_cgroup / "freezer.state").write_text("THAWED")
    killer.join(timeout=60)
    assert alive_when_kill_returned == [False]
    assert ended(ex, handle, timeout=30).state is WorkerState.EXITED
    assert worker_processes(Path(handle["dir"])) == []


FORKER = r"""
import os, time
children = 0
while children < 200:
    try:
        pid = os.fork()
    except BlockingIOError:  # EAGAIN: the pids limit
        break
    if pid == 0:
        time.sleep(1000)
        os._exit(0)
    children += 1
print(f"forked {children}", flush=True)
time.sleep(1000)
"""


def test_a_fork_bomb_stops_at_the_nodes_ceiling_and_the_machine_keeps_answering(
    make_executor: Callable[..., LocalExecutor], needs_cgroup: None
) -> None:
    """All workers of a machine together stay below the ceiling on the pool's cgroup, even
    where each worker alone may have more: the host keeps pids for everything else."""
    ex = make_executor(pids_limit=500, pids_ceiling=30)
    if "pids" not in ex.isolation.controllers:
        pytest.skip("the pids controller is not available here")
    handle = launch(ex, [sys.executable, "-c", FORKER])
    wait_until(lambda: "forked" in log(ex, handle), timeout=60)
    forked = int(log(ex, handle).split()[1])
    assert 0 < forked < 30  # the worker's own process counts too
    cgroup = cgroups.Cgroup.from_json(handle["cgroup"])
    assert cgroup is not None
    parent = Path(cgroup.dirs["unified" if cgroup.version == 2 else "pids"]).parent
    assert (parent / "pids.max").read_text().strip() == "30"
    # The pool itself, outside the workers' cgroup, still starts processes and answers.
    assert subprocess.run(["true"], check=False).returncode == 0
    assert ex.status([handle])[0].state is WorkerState.RUNNING
    ex.kill(handle)
    assert ended(ex, handle, timeout=30).signal == "SIGKILL"


def test_workers_together_stay_below_the_nodes_memory_ceiling(
    make_executor: Callable[..., LocalExecutor], needs_cgroup: None
) -> None:
    """A worker without a memory limit of its own is still held to the machine's ceiling."""
    ex = make_executor(memory_ceiling=64 << 20)
    if "memory" not in ex.isolation.controllers:
        pytest.skip("the memory controller is not available here")
    code = "x = bytearray(300 << 20); x[::4096] = b'1' * len(x[::4096]); print('survived')"
    handle = launch(ex, [sys.executable, "-c", code])
    status = ended(ex, handle, timeout=60)
    assert (status.exit_code, status.signal) == (137, "SIGKILL")
    assert "survived" not in log(ex, handle)
    assert ex.enforced().memory_ceiling == 64 << 20
