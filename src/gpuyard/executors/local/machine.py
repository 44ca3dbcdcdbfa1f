"""What this machine has: CPUs, memory, GPUs (through NVML when a driver is present)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import psutil

__all__ = ["GpuDevice", "Machine", "detect_machine"]


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    name: str
    uuid: str


@dataclass(frozen=True, slots=True)
class Machine:
    hostname: str
    cpus: int
    memory: int
    gpus: tuple[GpuDevice, ...]
    driver_version: str = ""


def detect_gpus() -> tuple[tuple[GpuDevice, ...], str]:
    """GPUs seen by NVML, and the driver version; none when there is no NVIDIA driver."""
    try:
        import pynvml
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        return (), ""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return (), ""
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            devices.append(
                GpuDevice(
                    i,
                    _text(pynvml.nvmlDeviceGetName(handle)),
                    _text(pynvml.nvmlDeviceGetUUID(handle)),
                )
            )
        return tuple(devices), driver
    except pynvml.NVMLError:
        return (), ""
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def detect_machine() -> Machine:
    gpus, driver = detect_gpus()
    return Machine(
        hostname=socket.gethostname(),
        cpus=psutil.cpu_count(logical=True) or 1,
        memory=psutil.virtual_memory().total,
        gpus=gpus,
        driver_version=driver,
    )
