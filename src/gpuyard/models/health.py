"""What a periodic inspection of a node found: one finding per probe (and per GPU).

An executor answers :meth:`gpuyard.executors.base.Executor.inspect` with a list of
:class:`Finding` per node; the controller stores the latest list with the node and cordons a
node on a *new* critical finding (docs/node-health.md). A probe that could not look (no NVIDIA
driver, a counter the GPU does not have) says :attr:`ProbeStatus.NOT_AVAILABLE`, never
:attr:`ProbeStatus.OK`: health that was not measured is not reported as good.

The Xid classification lives here, below both the executors (which classify the Xid events
NVML reports) and :mod:`gpuyard.diagnosis` (which classifies the Xids it reads in logs), so
that the one rule has one place (docs/references.md, "Fault signatures and Xids").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "APPLICATION_XIDS",
    "GPU_PROBES",
    "XID_NAMES",
    "Finding",
    "Probe",
    "ProbeStatus",
    "health_summary",
    "newly_critical",
    "worst",
    "xid_is_application",
    "xid_name",
]


class ProbeStatus(StrEnum):
    OK = "ok"
    """The probe looked and found nothing wrong."""
    WARNING = "warning"
    """Worth a look (a GPU throttling, a disk filling up, an application Xid); the node stays
    schedulable."""
    CRITICAL = "critical"
    """The node should not get new work: a new critical finding cordons it."""
    NOT_AVAILABLE = "not available"
    """The probe could not look (no driver, not supported by this GPU): health unknown."""

    @property
    def severity(self) -> int:
        """Order for "the worst finding": critical > warning > not available > ok."""
        return _SEVERITY[self]


_SEVERITY = {
    ProbeStatus.OK: 0,
    ProbeStatus.NOT_AVAILABLE: 1,
    ProbeStatus.WARNING: 2,
    ProbeStatus.CRITICAL: 3,
}


class Probe(StrEnum):
    HEARTBEAT = "heartbeat"
    """The executor's agent for the node answered (and can start supervisors)."""
    DISK = "disk"
    """Free space on the filesystem of the job directories."""
    NIC = "nic"
    """The network interface that holds the node's address is up."""
    GPU_TEMPERATURE = "gpu.temperature"
    GPU_ECC = "gpu.ecc"
    """Uncorrected ECC errors, volatile (since the driver loaded) and aggregate (lifetime)."""
    GPU_RETIRED_PAGES = "gpu.retired_pages"
    """Retired memory pages (row remapping on GPUs that remap rows instead)."""
    GPU_XID = "gpu.xid"
    """Xid events NVML reported since the last inspection."""


GPU_PROBES = (Probe.GPU_TEMPERATURE, Probe.GPU_ECC, Probe.GPU_RETIRED_PAGES, Probe.GPU_XID)
"""The probes of each GPU, in the order an executor reports them."""


class Finding(BaseModel):
    """What one probe found on one node (on one of its GPUs for the ``gpu.*`` probes)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    probe: Probe
    status: ProbeStatus
    value: float | int | str | None = Field(
        None, description="What was measured: °C, a count, a fraction free, an Xid code, …"
    )
    message: str = Field("", description="What it means, in words.")
    gpu: str | None = Field(
        None,
        description="The GPU as CUDA_VISIBLE_DEVICES names it on the node; none for the "
        "node's own probes and for GPU probes that could not reach any GPU.",
    )
    event: bool = Field(
        False,
        description="Reports something that happened since the last inspection (an Xid), "
        "not a lasting state: always new, so it cordons again after an uncordon.",
    )
    jobs: list[int] = Field(
        default_factory=list,
        description="Jobs placed on the GPU when it reported this (an application Xid is "
        "theirs, not the node's).",
    )

    @property
    def key(self) -> tuple[Probe, str | None]:
        """What a later inspection's finding is compared with: the same probe on the same GPU."""
        return (self.probe, self.gpu)

    @property
    def label(self) -> str:
        """``gpu.xid (GPU 1)``, ``disk``."""
        return f"{self.probe.value} (GPU {self.gpu})" if self.gpu is not None else self.probe.value

    def describe(self) -> str:
        """One line: label, value and message."""
        value = "" if self.value is None else f" = {self.value}"
        return f"{self.label}{value}: {self.message}" if self.message else f"{self.label}{value}"


def worst(findings: Iterable[Finding]) -> Finding | None:
    """The most severe finding (the first of equals); None for none."""
    found: Finding | None = None
    for f in findings:
        if found is None or f.status.severity > found.status.severity:
            found = f
    return found


def newly_critical(previous: Iterable[Finding], current: Iterable[Finding]) -> list[Finding]:
    """The critical findings of ``current`` that are new since ``previous`` (the same node's
    last inspection): an event (an Xid: it happened since then), or a state (a temperature, a
    count, a disk) whose probe on that GPU was not critical last time. Only these cordon a
    node, so a node an admin uncordoned is not cordoned again for what it was showing when
    they did; it is again when that clears and comes back, or a new event comes."""
    before = {f.key for f in previous if f.status is ProbeStatus.CRITICAL}
    return [
        f for f in current if f.status is ProbeStatus.CRITICAL and (f.event or f.key not in before)
    ]


def health_summary(findings: Sequence[Finding]) -> str:
    """What ``gpuyard nodes`` shows in its HEALTH column: ``-`` when nothing was inspected,
    ``critical: gpu.xid (GPU 1)`` (the worst, and how many more are not ok), else ``ok``,
    with how many probes could not look (``ok, 4 n/a``): ok is only what was measured."""
    top = worst(findings)
    if top is None:
        return "-"
    if top.status in (ProbeStatus.CRITICAL, ProbeStatus.WARNING):
        bad = sum(f.status in (ProbeStatus.CRITICAL, ProbeStatus.WARNING) for f in findings)
        more = f" (+{bad - 1})" if bad > 1 else ""
        return f"{top.status.value}: {top.label}{more}"
    unknown = sum(f.status is ProbeStatus.NOT_AVAILABLE for f in findings)
    if unknown == len(findings):
        return "not available"
    return f"ok, {unknown} n/a" if unknown else "ok"


APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 63, 92, 109})
"""Xids where the GPU stays healthy (NVIDIA's device plugin's applicationErrorXids, and 63, 92,
109 per Meta's GCM); every other Xid is node-critical."""

XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup after a previous error",
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    68: "video processor exception",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
}
"""The Xids docs/node-health.md names, for messages; others are shown by number only."""


def xid_is_application(code: int) -> bool:
    """Whether Xid ``code`` is an error of the application on a healthy GPU."""
    return code in APPLICATION_XIDS


def xid_name(code: int) -> str:
    """``Xid 79 (GPU has fallen off the bus)``."""
    name = XID_NAMES.get(code)
    return f"Xid {code} ({name})" if name else f"Xid {code}"
