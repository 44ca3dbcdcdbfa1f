"""The node inspection on this machine: real disk, NIC and heartbeat probes, NVML as it is here,
and the local executor's GPU probes over a fake NVML (docs/node-health.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuyard.executors.local import cgroups
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.machine import GpuDevice, Machine, detect_gpus
from gpuyard.executors.probes import host
from gpuyard.models.health import GPU_PROBES, Finding, Probe, ProbeStatus
from gpuyard.testing.nvml import FakeGpu, FakeNvml

NO_CGROUPS = cgroups.Isolation(cgroups.NONE)


def by_probe(findings: list[Finding]) -> dict[Probe, list[Finding]]:
    grouped: dict[Probe, list[Finding]] = {}
    for f in findings:
        grouped.setdefault(f.probe, []).append(f)
    return grouped


def test_the_disk_probe_reads_the_filesystem_of_the_job_dirs(tmp_path: Path) -> None:
    usage = shutil.disk_usage(tmp_path)
    free = usage.free / usage.total
    found = host.disk(tmp_path / "jobs")  # not made yet: its nearest parent's filesystem
    assert found.value == pytest.approx(free, abs=0.01)
    assert str(tmp_path / "jobs") in found.message
    expected = (
        ProbeStatus.CRITICAL
        if free < 0.03
        else ProbeStatus.WARNING
        if free < 0.10
        else ProbeStatus.OK
    )
    assert found.status is expected
    # The same disk against thresholds it is under.
    assert host.disk(tmp_path, host.DiskThresholds(1.0, 0.0)).status is ProbeStatus.WARNING
    critical = host.disk(tmp_path, host.DiskThresholds(1.0, 1.0))
    assert critical.status is ProbeStatus.CRITICAL and "below 100%" in critical.message
    with pytest.raises(ValueError, match="critical <= warning"):
        host.DiskThresholds(warning=0.01, critical=0.05)


@pytest.mark.parametrize(
    ("address", "status", "value"),
    [
        ("127.0.0.1", ProbeStatus.OK, "lo up"),
        ("127.0.0.7", ProbeStatus.OK, "lo up"),  # a virtual node's: on lo's 127.0.0.0/8
        ("203.0.113.9", ProbeStatus.CRITICAL, "missing"),  # TEST-NET-3: on no interface here
        ("not-an-address", ProbeStatus.CRITICAL, "missing"),
    ],
)
def test_the_nic_probe(address: str, status: ProbeStatus, value: str) -> None:
    found = host.nic(address)
    assert (found.status, found.value) == (status, value)


def test_the_heartbeat_writes_the_supervisors_directory(tmp_path: Path) -> None:
    found = host.heartbeat(tmp_path / "supervisors")
    assert found.status is ProbeStatus.OK and isinstance(found.value, float)
    assert list((tmp_path / "supervisors").iterdir()) == []  # it leaves nothing behind
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    dead = host.heartbeat(blocked / "supervisors")
    assert (dead.status, dead.value) == (ProbeStatus.CRITICAL, "unwritable")
    assert "no worker can be launched" in dead.message
    ticks = iter([0.0, 2.5])
    slow = host.heartbeat(tmp_path / "supervisors", clock=lambda: next(ticks))
    assert (slow.status, slow.value) == (ProbeStatus.WARNING, 2500.0)


def test_a_probe_that_breaks_is_a_warning_not_a_crash() -> None:
    def broken() -> Finding:
        raise RuntimeError("odd machine")

    found = host.guarded(Probe.NIC, broken)
    assert (found.status, found.message) == (
        ProbeStatus.WARNING,
        "the probe failed: RuntimeError: odd machine",
    )


def test_the_local_executor_inspects_this_machine(tmp_path: Path) -> None:
    executor = LocalExecutor(
        tmp_path / "home", virtual_nodes=2, gpus_per_node=1, isolation=NO_CGROUPS
    )
    try:
        found = executor.inspect()
    finally:
        executor.close()
    assert set(found) == {"node0", "node1"}
    for node, address in (("node0", "127.0.0.2"), ("node1", "127.0.0.3")):
        probes = by_probe(found[node])
        assert probes[Probe.HEARTBEAT][0].status is ProbeStatus.OK
        assert probes[Probe.DISK][0].status is not ProbeStatus.NOT_AVAILABLE
        assert probes[Probe.NIC][0].status is ProbeStatus.OK
        assert address in probes[Probe.NIC][0].message
        assert set(probes) == {Probe.HEARTBEAT, Probe.DISK, Probe.NIC, *GPU_PROBES}
        gpu = [f for f in found[node] if f.probe in GPU_PROBES]
        assert ProbeStatus.OK not in {f.status for f in gpu}  # virtual GPUs: never "ok"
        if not detect_gpus()[0]:  # no NVIDIA driver here
            assert {(f.status, f.message) for f in gpu} == {
                (ProbeStatus.NOT_AVAILABLE, "no NVIDIA driver (NVML Shared Library Not Found)")
            }


def test_the_local_executor_maps_each_gpu_to_its_node(tmp_path: Path) -> None:
    machine = Machine(
        hostname="gpubox",
        cpus=16,
        memory=64 << 30,
        gpus=tuple(GpuDevice(i, "NVIDIA H100", f"GPU-{i}") for i in range(4)),
        driver_version="550.54",
    )
    nvml = FakeNvml([FakeGpu(), FakeGpu(), FakeGpu(temperature=88), FakeGpu()])
    executor = LocalExecutor(
        tmp_path / "home", virtual_nodes=2, machine=machine, isolation=NO_CGROUPS, nvml=nvml
    )
    try:
        executor.inspect()
        nvml.xid(3, 79)
        found = executor.inspect()
    finally:
        executor.close()
    assert nvml.initialised == 0  # close shut NVML down
    node1 = {(f.probe, f.gpu): f.status for f in found["node1"] if f.probe in GPU_PROBES}
    assert node1 == {
        (Probe.GPU_TEMPERATURE, "2"): ProbeStatus.WARNING,
        (Probe.GPU_ECC, "2"): ProbeStatus.OK,
        (Probe.GPU_RETIRED_PAGES, "2"): ProbeStatus.OK,
        (Probe.GPU_XID, "2"): ProbeStatus.OK,
        (Probe.GPU_TEMPERATURE, "3"): ProbeStatus.OK,
        (Probe.GPU_ECC, "3"): ProbeStatus.OK,
        (Probe.GPU_RETIRED_PAGES, "3"): ProbeStatus.OK,
        (Probe.GPU_XID, "3"): ProbeStatus.CRITICAL,
    }
    assert {f.status for f in found["node0"] if f.probe in GPU_PROBES} == {ProbeStatus.OK}
