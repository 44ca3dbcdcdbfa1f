"""The machine's probes: the executor's heartbeat, free disk space, the node's network interface.

**Heartbeat.** On a cluster an executor has an agent on each node, and its heartbeat is the
agent answering. The local executor's agent is the executor itself, in the control plane's
process, and what it needs from the machine to start a worker is to write a supervisor's
directory. So its heartbeat is a round trip through that: a file created, written, synced
and removed in the supervisors' directory. It fails (critical) when the directory cannot be
written (a read-only or full filesystem, lost permissions: every launch would fail), and is
slow (warning) past :data:`SLOW_HEARTBEAT`. That the executor answered at all is checked by
the controller, which gives :meth:`~gpuyard.executors.base.Executor.inspect` a deadline.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpuyard.models.health import Finding, Probe, ProbeStatus
from gpuyard.quantities import format_bytes

__all__ = [
    "DISK_THRESHOLDS",
    "SLOW_HEARTBEAT",
    "DiskThresholds",
    "disk",
    "guarded",
    "heartbeat",
    "nic",
]

SLOW_HEARTBEAT = 1.0
"""Seconds a heartbeat's write may take before it is a warning (a disk that stalls)."""


@dataclass(frozen=True, slots=True)
class DiskThresholds:
    """Free fractions of the job directories' filesystem below which the disk probe warns and
    is critical. Fractions rather than bytes: what a job writes (checkpoints, outputs) grows
    with the machine, and a fixed number of bytes is either noise on a large disk or too late
    on a small one."""

    warning: float = 0.10
    critical: float = 0.03

    def __post_init__(self) -> None:
        if not 0 <= self.critical <= self.warning <= 1:
            raise ValueError("disk thresholds need 0 <= critical <= warning <= 1")


DISK_THRESHOLDS = DiskThresholds()
"""Warning below 10 % free, critical below 3 %."""


def guarded(probe: Probe, look: Callable[[], Finding]) -> Finding:
    """``look()``, or a warning saying the probe itself failed: one probe's bug or an odd
    machine must not hide what the other probes found."""
    try:
        return look()
    except Exception as exc:
        return Finding(
            probe=probe,
            status=ProbeStatus.WARNING,
            message=f"the probe failed: {type(exc).__name__}: {exc}",
        )


def heartbeat(directory: Path, *, clock: Callable[[], float] = time.monotonic) -> Finding:
    """The local executor's heartbeat (see the module's docstring)."""
    began = clock()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = directory / f".heartbeat-{os.getpid()}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, b"gpuyard heartbeat\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        path.unlink()
    except OSError as exc:
        return Finding(
            probe=Probe.HEARTBEAT,
            status=ProbeStatus.CRITICAL,
            value="unwritable",
            message=f"cannot write the supervisors' directory {directory}: {exc.strerror or exc}"
            " (no worker can be launched)",
        )
    took = clock() - began
    slow = took > SLOW_HEARTBEAT
    return Finding(
        probe=Probe.HEARTBEAT,
        status=ProbeStatus.WARNING if slow else ProbeStatus.OK,
        value=round(took * 1000, 1),
        message=f"the executor answered; writing its supervisors' directory took "
        f"{took * 1000:.1f} ms" + (f" (slow: over {SLOW_HEARTBEAT:g} s)" if slow else ""),
    )


def disk(path: Path, thresholds: DiskThresholds = DISK_THRESHOLDS) -> Finding:
    """Free space on the filesystem that holds ``path`` (the job directories; the nearest
    existing parent while they do not exist yet)."""
    where = path
    while not where.exists() and where != where.parent:
        where = where.parent
    usage = shutil.disk_usage(where)
    free = usage.free / usage.total if usage.total else 0.0
    if free < thresholds.critical:
        status, limit = ProbeStatus.CRITICAL, thresholds.critical
    elif free < thresholds.warning:
        status, limit = ProbeStatus.WARNING, thresholds.warning
    else:
        status, limit = ProbeStatus.OK, None
    below = f", below {limit:.0%}" if limit is not None else ""
    return Finding(
        probe=Probe.DISK,
        status=status,
        value=round(free, 4),
        message=f"{format_bytes(usage.free)} free of {format_bytes(usage.total)} "
        f"({free:.1%}{below}) on the filesystem of {path}",
    )


def nic(address: str, *, fallback: str | None = None) -> Finding:
    """Whether the interface that holds the node's ``address`` is up: the interface with that
    address, or one whose network contains it (a virtual node's 127.0.0.3 is on ``lo``'s
    127.0.0.0/8); ``fallback`` names the interface to use when none does."""
    found = _interface_of(address) or fallback
    stats = psutil.net_if_stats()
    if found is None or found not in stats:
        return Finding(
            probe=Probe.NIC,
            status=ProbeStatus.CRITICAL,
            value="missing",
            message=f"no interface of this machine holds the node's address {address}",
        )
    up = stats[found].isup
    speed = f", {stats[found].speed} Mb/s" if stats[found].speed else ""
    return Finding(
        probe=Probe.NIC,
        status=ProbeStatus.OK if up else ProbeStatus.CRITICAL,
        value=f"{found} {'up' if up else 'down'}",
        message=f"{found} holds {address} and is "
        + (f"up (mtu {stats[found].mtu}{speed})" if up else "down: the node is unreachable"),
    )


def _interface_of(address: str) -> str | None:
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return None
    containing: str | None = None
    for name, addresses in psutil.net_if_addrs().items():
        for snic in addresses:
            if snic.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                own = ipaddress.ip_address(snic.address.split("%")[0])
            except ValueError:
                continue
            if own == wanted:
                return name
            if snic.netmask and containing is None:
                try:
                    network = ipaddress.ip_network(f"{own}/{snic.netmask}", strict=False)
                except ValueError:
                    continue
                if wanted in network:
                    containing = name
    return containing
