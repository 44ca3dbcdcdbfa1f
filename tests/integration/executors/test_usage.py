"""What real workers use, read by the local executor: from their cgroup (v1 here, v2 where the
unified hierarchy is writable) or, without one, from their processes; and the machine as a node.

A worker burns CPU and holds 96 MiB; two readings a moment apart must show the CPU time grow
and the memory held. GPUs are measured through a meter the test passes (this machine has no
driver, where the real meter says None).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from gpuyard.executors.local import cgroups
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.gpumeter import GpuReading, NvmlMeter
from gpuyard.executors.local.machine import GpuDevice, Machine
from gpuyard.models.usage import WorkerUsage
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
MiB = 1 << 20

# Holds 96 MiB (touched, so resident), says so, then keeps one core busy.
BUSY = """
import sys, time
block = bytearray(96 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("holding", flush=True)
while True:
    sum(range(10000))
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


def launch(ex: LocalExecutor, argv: list[str], *, env: dict[str, str] | None = None) -> Handle:
    node = ex.nodes()[0].name
    return ex.launch(WorkerLaunch(WorkerKey(1, 0, 0), node, argv, {**ENV, **(env or {})}, "/", 1.0))


def wait_until(predicate: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def logged(ex: LocalExecutor, handle: Handle, text: str) -> Callable[[], bool]:
    return lambda: text in ex.read_log(handle, 0, 1 << 16)[0].decode()


def read(ex: LocalExecutor, handle: Handle) -> WorkerUsage:
    [usage] = ex.usage([handle])
    assert usage is not None
    return usage


def test_a_busy_workers_cpu_time_grows_and_its_memory_is_held(isolated: LocalExecutor) -> None:
    handle = launch(isolated, [sys.executable, "-c", BUSY])
    wait_until(logged(isolated, handle, "holding"))
    first = read(isolated, handle)
    time.sleep(1.0)
    second = read(isolated, handle)
    mode = isolated.isolation.mode
    expected_source = {
        cgroups.CGROUP_V1: "cgroup-v1",
        cgroups.CGROUP_V2: "cgroup-v2",
        cgroups.NONE: "processes",
    }[mode]
    assert first.source == second.source == expected_source
    assert first.cpu_seconds is not None and second.cpu_seconds is not None
    # A whole core for a second, on a machine shared with others: well above nothing.
    assert 0.2 < second.cpu_seconds - first.cpu_seconds < 2.5
    cgroup = cgroups.Cgroup.from_json(handle.get("cgroup"))
    if (
        cgroup is not None
        and mode == cgroups.CGROUP_V2
        and "memory" not in (isolated.isolation.controllers)
    ):
        assert second.memory is None  # a v2 hierarchy without the memory controller
    else:
        assert second.memory is not None
        assert 96 * MiB < second.memory < 400 * MiB
    assert (second.gpu_util, second.gpu_memory) == (None, None)  # no GPU: not measured
    isolated.kill(handle)
    wait_until(lambda: isolated.status([handle])[0].state is WorkerState.EXITED)
    assert isolated.usage([handle]) == [None]  # ended: its cgroup or processes are gone


def test_v1_counts_cpu_time_in_the_cpuacct_hierarchy(
    make_executor: Callable[..., LocalExecutor], needs_cgroup: None
) -> None:
    ex = make_executor()
    if ex.isolation.mode != cgroups.CGROUP_V1:
        pytest.skip("this machine gives workers cgroup v2")
    if not {"cpu", "cpuacct"} & set(ex.isolation.controllers):
        pytest.skip("neither cpu nor cpuacct is mounted here")
    handle = launch(ex, ["sleep", "30"])
    cgroup = cgroups.Cgroup.from_json(handle["cgroup"])
    assert cgroup is not None
    wait_until(lambda: bool(cgroup.procs()))
    accounting = cgroup.dirs.get("cpuacct") or cgroup.dirs["cpu"]
    assert Path(accounting, "cpuacct.usage").exists()
    assert cgroup.cpu_seconds() is not None


def test_a_handle_that_names_nothing_real_gives_none_not_an_error(
    make_executor: Callable[..., LocalExecutor], tmp_path: Path
) -> None:
    ex = make_executor()
    gone = {"version": 1, "dirs": {"freezer": str(tmp_path / "x"), "memory": str(tmp_path / "y")}}
    handles: list[Handle] = [
        {},
        {"cgroup": gone},
        {"cgroup": {"version": 2, "dirs": {"unified": str(tmp_path)}}},  # no counters in it
        {"dir": str(tmp_path / "nobody"), "cgroup": None},  # no process carries its marker
        {"cgroup": "nonsense", "dir": 5},
    ]
    assert ex.usage(handles) == [None] * len(handles)


class FakeMeter:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def read(self, devices: Sequence[str]) -> GpuReading | None:
        self.asked.append(list(devices))
        return GpuReading(util=40.0 * len(devices), memory=(1 << 30) * len(devices))

    def close(self) -> None:
        pass


def test_a_workers_gpus_are_measured_by_the_devices_it_was_given(
    make_executor: Callable[..., LocalExecutor],
) -> None:
    gpus = tuple(GpuDevice(i, "NVIDIA H100", f"GPU-{i}") for i in range(4))
    meter = FakeMeter()
    ex = make_executor(
        machine=Machine("box", cpus=8, memory=64 << 30, gpus=gpus, driver_version="550.1"),
        virtual_nodes=2,
        isolation=cgroups.Isolation(cgroups.NONE),
        gpu_meter=meter,
    )
    handle = launch(ex, ["sleep", "30"], env={"CUDA_VISIBLE_DEVICES": "0,1"})
    wait_until(lambda: read_or_none(ex, handle) is not None)
    usage = read(ex, handle)
    assert (usage.gpu_util, usage.gpu_memory) == (80.0, 2 << 30)
    assert meter.asked[-1] == ["0", "1"]
    nodes = ex.node_usage()
    assert set(nodes) == {"node0", "node1"}
    # A virtual node: its GPUs are measured, its CPU and memory are its workers'.
    assert (nodes["node1"].cpu_seconds, nodes["node1"].memory) == (None, None)
    assert nodes["node1"].gpu_util == 80.0 and meter.asked[-1] == ["2", "3"]


def read_or_none(ex: LocalExecutor, handle: Handle) -> WorkerUsage | None:
    return ex.usage([handle])[0]


def test_virtual_gpus_and_machines_without_a_driver_measure_no_gpu(
    make_executor: Callable[..., LocalExecutor],
) -> None:
    meter = FakeMeter()
    ex = make_executor(
        machine=Machine("box", cpus=8, memory=64 << 30, gpus=()),
        virtual_nodes=2,
        gpus_per_node=2,  # virtual GPUs: nothing stands behind them
        isolation=cgroups.Isolation(cgroups.NONE),
        gpu_meter=meter,
    )
    handle = launch(ex, ["sleep", "30"], env={"CUDA_VISIBLE_DEVICES": "0,1"})
    wait_until(lambda: read_or_none(ex, handle) is not None)
    assert read(ex, handle).gpu_util is None
    assert all(n.gpu_util is None for n in ex.node_usage().values())
    assert meter.asked == []
    assert NvmlMeter().read(["0"]) is None  # this machine: no driver, so nothing measured


def test_the_machine_as_one_node_is_measured_whole(
    make_executor: Callable[..., LocalExecutor],
) -> None:
    ex = make_executor(isolation=cgroups.Isolation(cgroups.NONE))
    [node] = ex.nodes()
    first = ex.node_usage()[node.name]
    time.sleep(0.2)
    second = ex.node_usage()[node.name]
    assert first.cpu_seconds is not None and second.cpu_seconds is not None
    assert second.cpu_seconds >= first.cpu_seconds > 0
    assert second.memory is not None and 0 < second.memory <= node.memory
    assert second.gpu_util is None  # no driver here
