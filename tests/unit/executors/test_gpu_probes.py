"""The GPU probes' rules against a fake NVML that answers as pynvml does (docs/node-health.md).

Each table row is one machine: the fake's GPUs, what happens on them, and what each probe must
say. The same code runs against the real ``pynvml`` on a machine with GPUs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pynvml
import pytest

from gpuyard.diagnosis.signatures import Suspect, xid_suspect
from gpuyard.executors.probes.gpu import GpuProber
from gpuyard.models.health import APPLICATION_XIDS, Finding, Probe, ProbeStatus
from gpuyard.testing.nvml import FakeGpu, FakeNvml, error

OK, WARNING, CRITICAL, NA = (
    ProbeStatus.OK,
    ProbeStatus.WARNING,
    ProbeStatus.CRITICAL,
    ProbeStatus.NOT_AVAILABLE,
)
NOT_SUPPORTED = error(pynvml.NVML_ERROR_NOT_SUPPORTED)


def inspect(nvml: FakeNvml, devices: tuple[str, ...] = ("0",)) -> list[Finding]:
    return GpuProber(nvml).inspect({"n0": devices})["n0"]


def of(findings: list[Finding], probe: Probe, gpu: str | None = "0") -> list[Finding]:
    return [f for f in findings if f.probe is probe and f.gpu == gpu]


def one(findings: list[Finding], probe: Probe, gpu: str | None = "0") -> Finding:
    [found] = of(findings, probe, gpu)
    return found


def test_a_healthy_gpu_is_ok_on_every_probe() -> None:
    found = inspect(FakeNvml([FakeGpu(temperature=50)]))
    assert [(f.probe, f.status) for f in found] == [
        (Probe.GPU_TEMPERATURE, OK),
        (Probe.GPU_ECC, OK),
        (Probe.GPU_RETIRED_PAGES, OK),
        (Probe.GPU_XID, OK),
    ]
    temperature = one(found, Probe.GPU_TEMPERATURE)
    assert temperature.value == 50
    assert "slowdown at 87 °C, shutdown at 92 °C" in temperature.message
    assert one(found, Probe.GPU_XID).message == "no Xid since the last inspection"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (13, WARNING),  # graphics engine exception: the application's
        (31, WARNING),  # page fault: the application's
        (43, WARNING),
        (48, CRITICAL),  # double-bit ECC
        (79, CRITICAL),  # fallen off the bus
        (64, CRITICAL),
        (95, CRITICAL),
        (119, CRITICAL),
        (1234, CRITICAL),  # an Xid nobody listed is the node's
    ],
)
def test_xids_are_classified_application_or_node_critical(code: int, status: ProbeStatus) -> None:
    nvml = FakeNvml([FakeGpu()])
    prober = GpuProber(nvml)
    prober.inspect({"n0": ("0",)})  # registers for events (NVML has none from before that)
    nvml.xid(0, code)
    xid = one(prober.inspect({"n0": ("0",)})["n0"], Probe.GPU_XID)
    assert (xid.status, xid.value, xid.event) == (status, code, True)
    says = "an application error" if status is WARNING else "node-critical"
    assert says in xid.message
    # Read once: the next inspection has nothing new.
    assert one(prober.inspect({"n0": ("0",)})["n0"], Probe.GPU_XID).status is OK


def test_the_xid_rule_is_the_one_diagnosis_uses() -> None:
    for code in range(256):
        application = xid_suspect(code) is Suspect.JOB
        assert application == (code in APPLICATION_XIDS)


def test_several_xids_each_get_a_finding_on_their_own_gpu() -> None:
    nvml = FakeNvml([FakeGpu(), FakeGpu()])
    prober = GpuProber(nvml)
    prober.inspect({"a": ("0",), "b": ("1",)})
    for code in (13, 13, 79):
        nvml.xid(1, code)
    found = prober.inspect({"a": ("0",), "b": ("1",)})
    assert one(found["a"], Probe.GPU_XID).status is OK
    xids = of(found["b"], Probe.GPU_XID, "1")
    assert [(f.value, f.status) for f in xids] == [(13, WARNING), (79, CRITICAL)]
    assert xids[0].message.startswith("Xid 13 (graphics engine exception) x2:")
    assert xids[1].message.startswith("Xid 79 (GPU has fallen off the bus):")


def test_an_xid_of_no_known_device_is_reported_on_every_node_with_gpus() -> None:
    nvml = FakeNvml([FakeGpu()])
    prober = GpuProber(nvml)
    prober.inspect({"n0": ("0",)})
    nvml.xid(None, 79)
    stray = one(prober.inspect({"n0": ("0",)})["n0"], Probe.GPU_XID, gpu=None)
    assert (stray.status, stray.value) == (CRITICAL, 79)


def test_a_gpu_that_cannot_report_xids_says_so_for_that_probe_only() -> None:
    nvml = FakeNvml([FakeGpu(events=NOT_SUPPORTED), FakeGpu()])
    found = GpuProber(nvml).inspect({"n0": ("0", "1")})["n0"]
    assert one(found, Probe.GPU_XID, "0").status is NA
    assert "not supported" in one(found, Probe.GPU_XID, "0").message
    assert one(found, Probe.GPU_XID, "1").status is OK
    assert one(found, Probe.GPU_TEMPERATURE, "0").status is OK


@pytest.mark.parametrize(
    ("gpu", "status", "value", "says"),
    [
        (FakeGpu(), OK, 0, "0 page(s) retired"),
        (FakeGpu(retired_single_bit=list(range(6)), retired_double_bit=[1, 2, 3, 4]), OK, 10, ""),
        (FakeGpu(retired_double_bit=list(range(11))), CRITICAL, 11, "over 10"),
        (FakeGpu(retirement_pending=True), CRITICAL, "pending", "reset the GPU"),
        # Ampere on: no page retirement, a row remapper instead.
        (
            FakeGpu(retirement_pending=NOT_SUPPORTED, remapped_rows=(2, 1, False, False)),
            OK,
            3,
            "row remapping: 3 row(s) remapped (1 uncorrectable)",
        ),
        (
            FakeGpu(retirement_pending=NOT_SUPPORTED, remapped_rows=(0, 1, True, False)),
            CRITICAL,
            "pending",
            "a remapping is pending",
        ),
        (
            FakeGpu(retirement_pending=NOT_SUPPORTED, remapped_rows=(0, 9, False, True)),
            CRITICAL,
            "failed",
            "a remapping failed",
        ),
        (FakeGpu(retirement_pending=NOT_SUPPORTED), NA, None, "not supported"),
        (FakeGpu(retirement_pending=error(pynvml.NVML_ERROR_UNKNOWN)), WARNING, None, "NVML"),
    ],
)
def test_retired_pages(gpu: FakeGpu, status: ProbeStatus, value: object, says: str) -> None:
    retired = one(inspect(FakeNvml([gpu])), Probe.GPU_RETIRED_PAGES)
    assert (retired.status, retired.value) == (status, value)
    assert says in retired.message


@pytest.mark.parametrize(
    ("gpu", "status", "value", "says"),
    [
        (FakeGpu(ecc_volatile=0, ecc_aggregate=3), OK, 0, "0 uncorrected since the driver"),
        (FakeGpu(ecc_volatile=1, ecc_aggregate=1), CRITICAL, 1, "corrupt until a reset"),
        (FakeGpu(ecc_volatile=0, ecc_aggregate=5), WARNING, 0, "consider an RMA"),
        (FakeGpu(ecc_volatile=0, ecc_aggregate=NOT_SUPPORTED), OK, 0, "unknown in the GPU"),
        # A consumer card: no ECC at all.
        (FakeGpu(ecc_volatile=NOT_SUPPORTED, ecc_aggregate=NOT_SUPPORTED), NA, None, "ECC"),
        (
            FakeGpu(ecc_volatile=error(pynvml.NVML_ERROR_NO_PERMISSION)),
            NA,
            None,
            "no permission",
        ),
    ],
)
def test_ecc(gpu: FakeGpu, status: ProbeStatus, value: object, says: str) -> None:
    found = inspect(FakeNvml([gpu]))
    ecc = one(found, Probe.GPU_ECC)
    assert (ecc.status, ecc.value) == (status, value)
    assert says in ecc.message
    # ECC's answer is ECC's alone.
    assert {f.status for f in found if f.probe is not Probe.GPU_ECC} == {OK}


@pytest.mark.parametrize(
    ("gpu", "status", "says"),
    [
        (FakeGpu(temperature=86, slowdown=87, shutdown=92), OK, "86 °C, normal"),
        (FakeGpu(temperature=87, slowdown=87, shutdown=92), WARNING, "throttling"),
        (FakeGpu(temperature=89, slowdown=87, shutdown=92), CRITICAL, "about to shut down"),
        # No thresholds from NVML: the defaults, and the message says so.
        (FakeGpu(temperature=84, slowdown=NOT_SUPPORTED, shutdown=NOT_SUPPORTED), OK, "defaults"),
        (FakeGpu(temperature=85, slowdown=NOT_SUPPORTED, shutdown=NOT_SUPPORTED), WARNING, ""),
        (FakeGpu(temperature=92, slowdown=NOT_SUPPORTED, shutdown=NOT_SUPPORTED), CRITICAL, ""),
        (FakeGpu(temperature=NOT_SUPPORTED), NA, "reading the temperature: not supported"),
    ],
)
def test_temperature(gpu: FakeGpu, status: ProbeStatus, says: str) -> None:
    temperature = one(inspect(FakeNvml([gpu])), Probe.GPU_TEMPERATURE)
    assert temperature.status is status
    assert says in temperature.message


def test_a_lost_gpu_is_critical_on_every_probe_and_the_others_are_unaffected() -> None:
    found = GpuProber(FakeNvml([FakeGpu(), FakeGpu(lost=True)])).inspect({"n0": ("0", "1")})
    lost = [f for f in found["n0"] if f.gpu == "1"]
    assert {(f.status, f.message) for f in lost} == {
        (CRITICAL, "the GPU is lost (fallen off the bus?)")
    }
    assert len(lost) == 4
    assert {f.status for f in found["n0"] if f.gpu == "0"} == {OK}


def test_devices_named_by_uuid_are_found() -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="GPU-bbbb", temperature=90)])
    prober = GpuProber(nvml)
    prober.inspect({"n0": ("GPU-bbbb",)})
    nvml.xid(1, 79)
    found = prober.inspect({"n0": ("GPU-bbbb",)})["n0"]
    assert one(found, Probe.GPU_TEMPERATURE, "GPU-bbbb").value == 90
    assert one(found, Probe.GPU_XID, "GPU-bbbb").value == 79


def test_without_a_driver_every_gpu_probe_is_not_available_never_ok() -> None:
    prober = GpuProber(FakeNvml(driver=False))
    found = prober.inspect({"cpu-only": ()}, virtual=["virtual0"])
    for node in ("cpu-only", "virtual0"):
        assert [(f.probe, f.status, f.gpu) for f in found[node]] == [
            (Probe.GPU_TEMPERATURE, NA, None),
            (Probe.GPU_ECC, NA, None),
            (Probe.GPU_RETIRED_PAGES, NA, None),
            (Probe.GPU_XID, NA, None),
        ]
        assert all(
            f.message == "no NVIDIA driver (NVML Shared Library Not Found)" for f in found[node]
        )


def test_a_node_whose_gpus_nvml_found_before_is_critical_when_nvml_cannot_start() -> None:
    found = GpuProber(FakeNvml([FakeGpu()], driver=False)).inspect({"n0": ("0",)})["n0"]
    assert {f.status for f in found} == {CRITICAL}
    assert "the driver has gone away" in found[0].message


def test_nvml_is_started_once_retried_while_it_cannot_start_and_shut_down_on_close() -> None:
    nvml = FakeNvml([FakeGpu()], driver=False)
    prober = GpuProber(nvml)
    assert one(prober.inspect({"n0": ("0",)})["n0"], Probe.GPU_ECC, None).status is CRITICAL
    nvml.driver = True  # the driver is loaded again
    prober.inspect({"n0": ("0",)})
    prober.inspect({"n0": ("0",)})
    assert (nvml.initialised, nvml.registered) == (1, {0})
    prober.close()
    assert nvml.initialised == 0


def test_virtual_gpus_are_not_available_with_nvml_too() -> None:
    found = GpuProber(FakeNvml([FakeGpu()])).inspect({}, virtual=["v0"])["v0"]
    assert {(f.status, f.message) for f in found} == {
        (NA, "virtual GPUs: no device stands behind them")
    }


def test_the_events_are_polled_without_waiting_and_an_xid_storm_is_bounded() -> None:
    nvml = FakeNvml([FakeGpu()])
    prober = GpuProber(nvml)
    prober.inspect({"n0": ("0",)})
    for _ in range(1005):
        nvml.xid(0, 13)
    found = prober.inspect({"n0": ("0",)})["n0"]
    assert one(found, Probe.GPU_XID).message.startswith("Xid 13 (graphics engine exception) x1000")
    rest = one(prober.inspect({"n0": ("0",)})["n0"], Probe.GPU_XID)
    assert rest.message.startswith("Xid 13 (graphics engine exception) x5")


class HangingNvml(FakeNvml):
    """NVML whose temperature read hangs until released (a GPU in a bad state)."""

    def __init__(self) -> None:
        super().__init__([FakeGpu()])
        self.entered, self.release = threading.Event(), threading.Event()

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        self.entered.set()
        self.release.wait(10)
        return super().nvmlDeviceGetTemperature(handle, sensor)


def test_close_does_not_hang_behind_a_hung_nvml_call() -> None:
    nvml = HangingNvml()
    prober = GpuProber(nvml)
    inspecting = threading.Thread(target=prober.inspect, args=({"n0": ("0",)},))
    inspecting.start()
    assert nvml.entered.wait(5)
    began = time.monotonic()
    prober.close(timeout=0.1)
    assert time.monotonic() - began < 2 and nvml.initialised == 1  # left to the process's exit
    nvml.release.set()
    inspecting.join(5)
    prober.close()
    assert nvml.initialised == 0
