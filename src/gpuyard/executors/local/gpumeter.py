"""GPU figures of a set of devices through NVML (nvidia-ml-py), for usage sampling.

A worker is given whole GPUs (``CUDA_VISIBLE_DEVICES``), so a device's figures are its
worker's: utilisation (percent of the last sample period in which a kernel ran) and memory in
use. Without a driver, or when a device cannot be read, the answer is None: nothing was
measured, which is not the same as an idle GPU.

:class:`GpuMeter` is the seam: the executor takes one, tests pass their own.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["GpuMeter", "GpuReading", "NoGpus", "NvmlMeter"]


@dataclass(frozen=True, slots=True)
class GpuReading:
    util: float
    """Mean utilisation of the devices, percent."""
    memory: int
    """Bytes in use on the devices, together."""


class GpuMeter(Protocol):
    def read(self, devices: Sequence[str]) -> GpuReading | None:
        """The devices' figures (each an index or a UUID, as CUDA_VISIBLE_DEVICES names
        them); None when any of them cannot be read, or none is given."""
        ...

    def close(self) -> None: ...


class NoGpus:
    """A machine without GPUs: nothing is ever measured."""

    def read(self, devices: Sequence[str]) -> GpuReading | None:
        return None

    def close(self) -> None:
        pass


class NvmlMeter:
    """NVML, initialised on the first read and kept open; a machine without a driver is found
    out once and never asked again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._tried = False

    def _open(self) -> Any:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    import pynvml

                    pynvml.nvmlInit()
                except Exception:  # ImportError, NVMLError: no driver, no library
                    return None
                self._nvml = pynvml
            return self._nvml

    def read(self, devices: Sequence[str]) -> GpuReading | None:
        if not devices:
            return None
        nvml = self._open()
        if nvml is None:
            return None
        utils, memory = [], 0
        try:
            for device in devices:
                handle = (
                    nvml.nvmlDeviceGetHandleByIndex(int(device))
                    if device.isdigit()
                    else nvml.nvmlDeviceGetHandleByUUID(device)
                )
                utils.append(float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                memory += int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except nvml.NVMLError:
            return None
        return GpuReading(util=sum(utils) / len(utils), memory=memory)

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                try:  # noqa: SIM105 - a driver gone meanwhile: nothing to release
                    self._nvml.nvmlShutdown()
                except self._nvml.NVMLError:
                    pass
                self._nvml = None
