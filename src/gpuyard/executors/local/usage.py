"""What local workers and this machine use: CPU time, memory, GPUs.

A worker's CPU time and memory come from its cgroup where it has one (cgroup v1
``cpuacct.usage`` and ``memory.usage_in_bytes``; v2 ``cpu.stat`` and ``memory.current``; each
less the reclaimable file cache for memory): the kernel counts every process of the worker,
those that left its process group and those that ended. Without a cgroup they are added up
over its live processes, found as the executor finds them to signal them: the processes that
started with the worker's control directory in their environment (an ended process takes its
CPU time along, so the count can go back; :func:`gpuyard.models.usage.cpu_cores` starts a new
count then). The supervisor is in neither: it is the pool's, not the job's.

GPU figures come from NVML for the devices the worker was given, on nodes whose GPUs are real
(``gpu.kind=nvidia``); virtual GPUs have nothing to measure.

A worker whose cgroup or processes are gone is None; nothing here raises for one worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import psutil

from gpuyard.executors.local import cgroups, procfs
from gpuyard.executors.local.gpumeter import GpuMeter
from gpuyard.models.usage import NodeUsage, WorkerUsage
from gpuyard.models.worker import Handle, NodeInfo

__all__ = ["machine_usage", "node_gpus", "processes_usage", "worker_usages"]


def worker_usages(
    handles: Sequence[Handle],
    *,
    marker: Mapping[int, str],
    nodes: Mapping[str, NodeInfo],
    meter: GpuMeter,
) -> list[WorkerUsage | None]:
    """Each worker's usage, in the order of ``handles``. ``marker``: for the handles (by
    index) that have no cgroup, the environment entry their processes carry."""
    pids = procfs.by_environ(set(marker.values())) if marker else {}
    found: list[WorkerUsage | None] = []
    for i, handle in enumerate(handles):
        try:
            if i in marker:
                usage = processes_usage(pids.get(marker[i], []))
            else:
                usage = _cgroup_usage(cgroups.Cgroup.from_json(handle.get("cgroup")))
            if usage is not None:
                usage = _with_gpus(usage, handle, nodes, meter)
        except (OSError, ValueError, TypeError, psutil.Error):
            usage = None
        found.append(usage)
    return found


def _cgroup_usage(cgroup: cgroups.Cgroup | None) -> WorkerUsage | None:
    if cgroup is None or not cgroup.exists():
        return None
    cpu, memory = cgroup.cpu_seconds(), cgroup.memory_in_use()
    if cpu is None and memory is None:
        return None
    return WorkerUsage(cpu_seconds=cpu, memory=memory, source=f"cgroup-v{cgroup.version}")


def processes_usage(pids: Sequence[int]) -> WorkerUsage | None:
    """CPU time (theirs and their reaped children's) and resident memory of these processes
    together; None when none of them can be read (all gone)."""
    cpu, memory, read = 0.0, 0, 0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                times = proc.cpu_times()
                rss = proc.memory_info().rss
        except psutil.Error:  # ended meanwhile, or a zombie
            continue
        cpu += times.user + times.system + times.children_user + times.children_system
        memory += rss
        read += 1
    if not read:
        return None
    return WorkerUsage(cpu_seconds=cpu, memory=memory, source="processes")


def _with_gpus(
    usage: WorkerUsage, handle: Handle, nodes: Mapping[str, NodeInfo], meter: GpuMeter
) -> WorkerUsage:
    node = nodes.get(str(handle.get("node")))
    devices = handle.get("gpus")
    if node is None or not _real_gpus(node) or not isinstance(devices, list):
        return usage
    reading = meter.read([str(d) for d in devices])
    if reading is None:
        return usage
    return WorkerUsage(
        cpu_seconds=usage.cpu_seconds,
        memory=usage.memory,
        gpu_util=reading.util,
        gpu_memory=reading.memory,
        source=usage.source,
    )


def _real_gpus(node: NodeInfo) -> bool:
    return node.labels.get("gpu.kind") == "nvidia" and bool(node.gpu_devices)


def node_gpus(node: NodeInfo, meter: GpuMeter) -> tuple[float | None, int | None]:
    """GPU utilisation and memory of a node's devices (None, None: not measured)."""
    reading = meter.read(list(node.gpu_devices)) if _real_gpus(node) else None
    return (None, None) if reading is None else (reading.util, reading.memory)


def machine_usage(node: NodeInfo, meter: GpuMeter) -> NodeUsage:
    """This machine as one node: CPU time of everything that ran (all but idle and I/O wait;
    guest time is already in user time), memory in use (total less available), its GPUs."""
    times = psutil.cpu_times()
    busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
    busy -= getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    memory = psutil.virtual_memory()
    util, gpu_memory = node_gpus(node, meter)
    return NodeUsage(
        cpu_seconds=busy,
        memory=int(memory.total - memory.available),
        gpu_util=util,
        gpu_memory=gpu_memory,
    )
