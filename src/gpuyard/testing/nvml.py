"""A fake NVML for tests of the GPU probes (:class:`gpuyard.executors.probes.gpu.NvmlLibrary`).

It answers like ``pynvml`` does: the same function names and argument order, ints and lists
where the library returns them, opaque device handles, an event record with ``device``,
``eventType`` and ``eventData``, and real ``pynvml.NVMLError`` instances carrying NVML's error
codes (``NVML_ERROR_NOT_SUPPORTED`` for ECC on a consumer card, ``NVML_ERROR_TIMEOUT`` from an
event set with nothing in it, ``NVML_ERROR_LIBRARY_NOT_FOUND`` from ``nvmlInit`` without a
driver). Any answer of a :class:`FakeGpu` may be an error code instead of a value (see
:func:`error`), so a test sets up exactly the machine it describes.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

__all__ = ["FakeEvent", "FakeGpu", "FakeNvml", "NvmlError", "error"]


@dataclass(frozen=True)
class NvmlError:
    """An answer that is an NVML error: the call raises ``pynvml.NVMLError(code)``."""

    code: int


def error(code: int) -> NvmlError:
    """``error(pynvml.NVML_ERROR_NOT_SUPPORTED)``: what a call answers instead of a value."""
    return NvmlError(code)


T = TypeVar("T")

NOT_SUPPORTED = error(pynvml.NVML_ERROR_NOT_SUPPORTED)


@dataclass
class FakeGpu:
    """One GPU's answers. Defaults: a healthy data-center GPU that retires pages."""

    uuid: str = ""
    temperature: int | NvmlError = 45
    slowdown: int | NvmlError = 87
    shutdown: int | NvmlError = 92
    ecc_volatile: int | NvmlError = 0
    ecc_aggregate: int | NvmlError = 0
    retired_single_bit: list[int] | NvmlError = field(default_factory=list)
    retired_double_bit: list[int] | NvmlError = field(default_factory=list)
    retirement_pending: bool | NvmlError = False
    remapped_rows: tuple[int, int, bool, bool] | NvmlError = NOT_SUPPORTED
    """(corrected, uncorrected, pending, failed); a GPU that retires pages has no row remapper."""
    events: bool | NvmlError = True
    """Whether it can be registered for Xid events (an error code: what registering raises)."""
    lost: bool = False
    """Every call about it raises NVML_ERROR_GPU_IS_LOST (it fell off the bus)."""


@dataclass(frozen=True)
class _Handle:
    index: int


@dataclass(frozen=True)
class FakeEvent:
    """As ``pynvml.c_nvmlEventData_t``: the device's handle, the event type, its data."""

    device: Any
    eventType: int  # pynvml's field names
    eventData: int


class FakeNvml:
    """NVML for :class:`FakeGpu` s; ``driver`` False: ``nvmlInit`` fails as without a driver."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *, driver: bool = True) -> None:
        self.gpus = list(gpus or [])
        for i, gpu in enumerate(self.gpus):
            gpu.uuid = gpu.uuid or f"GPU-fake-{i:04d}"
        self.driver = driver
        self.initialised = 0
        self.registered: set[int] = set()
        self.waits = 0
        self._queue: deque[FakeEvent] = deque()
        self._sets = 0
        self._lock = threading.Lock()

    # -- what a test does -----------------------------------------------------------------

    def xid(self, index: int | None, code: int) -> None:
        """GPU ``index`` reports Xid ``code`` (``None``: an event of no device NVML knows).
        Only a GPU registered for Xid events gets it to the event set, as with NVML."""
        with self._lock:
            if index is None:
                self._queue.append(FakeEvent(None, pynvml.nvmlEventTypeXidCriticalError, code))
            elif index in self.registered:
                self._queue.append(
                    FakeEvent(_Handle(index), pynvml.nvmlEventTypeXidCriticalError, code)
                )

    # -- the library ----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if not self.driver:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._ready()
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._ready()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._gpu(_Handle(index))
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> _Handle:
        self._ready()
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return self.nvmlDeviceGetHandleByIndex(i)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        self._ready()
        if not isinstance(handle, _Handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle.index

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _answer(self._gpu(handle).temperature)

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        gpu = self._gpu(handle)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return _answer(gpu.slowdown)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return _answer(gpu.shutdown)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(handle)
        if error_type != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if counter_type == pynvml.NVML_VOLATILE_ECC:
            return _answer(gpu.ecc_volatile)
        if counter_type == pynvml.NVML_AGGREGATE_ECC:
            return _answer(gpu.ecc_aggregate)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        gpu = self._gpu(handle)
        if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
            return list(_answer(gpu.retired_single_bit))
        if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            return list(_answer(gpu.retired_double_bit))
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        pending = _answer(self._gpu(handle).retirement_pending)
        return int(pynvml.NVML_FEATURE_ENABLED if pending else pynvml.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        corrected, uncorrected, pending, failed = _answer(self._gpu(handle).remapped_rows)
        return (corrected, uncorrected, int(pending), int(failed))

    def nvmlEventSetCreate(self) -> str:
        self._ready()
        self._sets += 1
        return f"event-set-{self._sets}"

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        gpu = self._gpu(handle)
        if isinstance(gpu.events, NvmlError):
            raise pynvml.NVMLError(gpu.events.code)
        if event_types & pynvml.nvmlEventTypeXidCriticalError:
            self.registered.add(handle.index)

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> FakeEvent:
        self._ready()
        with self._lock:
            self.waits += 1
            if not self._queue:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)  # waits timeout_ms: none here
            return self._queue.popleft()

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._ready()

    # -- inside ---------------------------------------------------------------------------

    def _ready(self) -> None:
        if self.initialised <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any) -> FakeGpu:
        self._ready()
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu


def _answer(value: T | NvmlError) -> T:
    if isinstance(value, NvmlError):
        raise pynvml.NVMLError(value.code)
    return value
