"""What a node's findings add up to: the worst, the HEALTH column, and which are new."""

from __future__ import annotations

import pytest

from gpuyard.models.health import Finding, Probe, ProbeStatus, health_summary, newly_critical

OK, WARNING, CRITICAL, NA = (
    ProbeStatus.OK,
    ProbeStatus.WARNING,
    ProbeStatus.CRITICAL,
    ProbeStatus.NOT_AVAILABLE,
)


def f(
    probe: Probe,
    status: ProbeStatus,
    gpu: str | None = None,
    *,
    event: bool = False,
    value: float | str | None = None,
) -> Finding:
    return Finding(probe=probe, status=status, gpu=gpu, event=event, value=value)


@pytest.mark.parametrize(
    ("findings", "shown"),
    [
        ([], "-"),
        ([f(Probe.DISK, OK), f(Probe.NIC, OK)], "ok"),
        ([f(Probe.DISK, OK), f(Probe.GPU_ECC, NA), f(Probe.GPU_XID, NA)], "ok, 2 n/a"),
        ([f(Probe.GPU_ECC, NA)], "not available"),
        ([f(Probe.DISK, WARNING), f(Probe.GPU_ECC, NA)], "warning: disk"),
        (
            [f(Probe.DISK, WARNING), f(Probe.GPU_XID, CRITICAL, "1"), f(Probe.NIC, CRITICAL)],
            "critical: gpu.xid (GPU 1) (+2)",
        ),
    ],
)
def test_the_health_column(findings: list[Finding], shown: str) -> None:
    assert health_summary(findings) == shown


@pytest.mark.parametrize(
    ("previous", "current", "new"),
    [
        # First inspection: every critical is new.
        ([], [f(Probe.DISK, CRITICAL), f(Probe.NIC, OK)], [f(Probe.DISK, CRITICAL)]),
        # Still critical: not new (an admin who uncordoned it saw it).
        ([f(Probe.DISK, CRITICAL)], [f(Probe.DISK, CRITICAL)], []),
        # Warning before, critical now: new.
        ([f(Probe.DISK, WARNING)], [f(Probe.DISK, CRITICAL)], [f(Probe.DISK, CRITICAL)]),
        # The same probe on another GPU is another finding.
        (
            [f(Probe.GPU_ECC, CRITICAL, "0")],
            [f(Probe.GPU_ECC, CRITICAL, "0"), f(Probe.GPU_ECC, CRITICAL, "1")],
            [f(Probe.GPU_ECC, CRITICAL, "1")],
        ),
        # An event happened since the last inspection: always new.
        (
            [f(Probe.GPU_XID, CRITICAL, "0", event=True, value=79)],
            [f(Probe.GPU_XID, CRITICAL, "0", event=True, value=79)],
            [f(Probe.GPU_XID, CRITICAL, "0", event=True, value=79)],
        ),
        ([], [f(Probe.GPU_XID, WARNING, "0", event=True, value=13)], []),
    ],
)
def test_newly_critical(
    previous: list[Finding], current: list[Finding], new: list[Finding]
) -> None:
    assert newly_critical(previous, current) == new


def test_a_finding_round_trips_through_json_with_its_value_type() -> None:
    for value in (79, 0.25, "lo up", None):
        finding = f(Probe.GPU_XID, CRITICAL, "0", event=True, value=value)
        back = Finding.model_validate(finding.model_dump(mode="json"))
        assert back == finding and type(back.value) is type(value)
    assert finding.describe() == "gpu.xid (GPU 0)"
