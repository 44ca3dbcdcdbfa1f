"""The GPU probes, through NVML: temperature, uncorrected ECC errors, retired pages, Xid events.

Every NVML call goes through a :class:`NvmlLibrary`: the ``pynvml`` module itself in
production, a fake with the same functions, return types and ``NVMLError`` codes in tests
(:class:`gpuyard.testing.nvml.FakeNvml`). The rules (thresholds, the Xid classification, what
an error code means) are therefore the same code in both.

What each probe says (docs/node-health.md):

- **No NVML** (no driver, as on a machine without GPUs): every GPU probe of a node is *not
  available*, never ok. A node whose GPUs were found through NVML when the executor started
  is *critical* instead: its driver has gone away.
- **An NVML error on one call** is that probe's answer alone: ``NVML_ERROR_NOT_SUPPORTED``
  (ECC on a consumer card, retired pages on a GPU that remaps rows) and
  ``NVML_ERROR_NO_PERMISSION`` are *not available*; ``NVML_ERROR_GPU_IS_LOST`` and
  ``NVML_ERROR_RESET_REQUIRED`` are *critical*; any other is a *warning*.
- **Temperature**: warning from the GPU's slowdown threshold (it throttles), critical within
  :data:`SHUTDOWN_MARGIN` °C of its shutdown threshold; NVML's thresholds where the GPU has
  them, else :data:`DEFAULT_SLOWDOWN` / :data:`DEFAULT_SHUTDOWN`.
- **ECC**: critical for any uncorrected error since the driver loaded (volatile: the memory
  may be corrupt until a reset); warning for more than :data:`AGGREGATE_ECC_LIMIT` in the
  GPU's life (aggregate; stas00's RMA advice, docs/node-health.md).
- **Retired pages**: critical when a retirement is pending (it takes a reset) or more than
  :data:`RETIRED_PAGES_LIMIT` pages are retired (Meta GCM's rule). GPUs from Ampere on remap
  rows instead and answer NOT_SUPPORTED; for them the probe reads the row remapper: critical
  when a remapping is pending or has failed.
- **Xid**: events of type ``nvmlEventTypeXidCriticalError`` from an event set registered once
  for every GPU and polled without blocking (timeout 0) at each inspection. An application Xid
  (:func:`gpuyard.models.health.xid_is_application`) is a warning, attributed by the
  controller to the jobs on that GPU; any other is critical. Xids from before the event set
  was registered (before the executor started) are not seen: the kernel log has them.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

import pynvml

from gpuyard.models.health import (
    GPU_PROBES,
    Finding,
    Probe,
    ProbeStatus,
    xid_is_application,
    xid_name,
)

__all__ = [
    "AGGREGATE_ECC_LIMIT",
    "DEFAULT_SHUTDOWN",
    "DEFAULT_SLOWDOWN",
    "MAX_EVENTS",
    "RETIRED_PAGES_LIMIT",
    "SHUTDOWN_MARGIN",
    "GpuProber",
    "NvmlLibrary",
]

DEFAULT_SLOWDOWN = 85
"""°C where a GPU is taken to throttle when NVML does not give its slowdown threshold."""
DEFAULT_SHUTDOWN = 95
"""°C where a GPU is taken to shut down when NVML does not give its shutdown threshold."""
SHUTDOWN_MARGIN = 3
"""Within this many °C of its shutdown threshold a GPU is critical."""
AGGREGATE_ECC_LIMIT = 4
"""Uncorrected ECC errors in a GPU's life above which it is a warning (RMA advice)."""
RETIRED_PAGES_LIMIT = 10
"""Retired pages above which a GPU is critical (Meta GCM)."""
MAX_EVENTS = 1000
"""Events read per inspection at most (a GPU in an Xid storm must not hold the probe)."""
CLOSE_WAIT = 5.0
"""Seconds :meth:`GpuProber.close` waits for an inspection that holds NVML."""


class NvmlLibrary(Protocol):
    """The part of ``pynvml`` the probes call. Errors are ``pynvml.NVMLError`` with ``value``
    the NVML error code, as the real library raises them."""

    def nvmlInit(self, /) -> None: ...
    def nvmlShutdown(self, /) -> None: ...
    def nvmlDeviceGetCount(self, /) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Any: ...
    def nvmlDeviceGetHandleByUUID(self, uuid: str, /) -> Any: ...
    def nvmlDeviceGetIndex(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int, /) -> int: ...
    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int, /) -> int: ...
    def nvmlDeviceGetTotalEccErrors(
        self, handle: Any, error_type: int, counter_type: int, /
    ) -> int: ...
    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int, /) -> list[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any, /) -> tuple[int, int, int, int]: ...
    def nvmlEventSetCreate(self, /) -> Any: ...
    def nvmlDeviceRegisterEvents(
        self, handle: Any, event_types: int, event_set: Any, /
    ) -> None: ...
    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int, /) -> Any:
        """An event (``device``, ``eventType``, ``eventData``: the Xid); raises
        NVML_ERROR_TIMEOUT when there is none."""
        ...

    def nvmlEventSetFree(self, event_set: Any, /) -> None: ...


_NOT_AVAILABLE = {
    pynvml.NVML_ERROR_NOT_SUPPORTED: "not supported by this GPU or driver",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "not supported by this driver",
    pynvml.NVML_ERROR_NO_PERMISSION: "no permission to read it",
}
_CRITICAL = {
    pynvml.NVML_ERROR_GPU_IS_LOST: "the GPU is lost (fallen off the bus?)",
    pynvml.NVML_ERROR_RESET_REQUIRED: "the GPU needs a reset",
}
_NO_DRIVER = (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)


def _error_finding(probe: Probe, gpu: str | None, exc: Exception, what: str) -> Finding:
    """What an NVML error on ``what`` means for ``probe`` (see the module's docstring)."""
    code = getattr(exc, "value", None)
    if code in _NOT_AVAILABLE:
        return Finding(
            probe=probe,
            gpu=gpu,
            status=ProbeStatus.NOT_AVAILABLE,
            message=f"{what}: {_NOT_AVAILABLE[code]}",
        )
    if code in _CRITICAL:
        return Finding(
            probe=probe, gpu=gpu, status=ProbeStatus.CRITICAL, value="lost", message=_CRITICAL[code]
        )
    return Finding(
        probe=probe, gpu=gpu, status=ProbeStatus.WARNING, message=f"{what}: NVML error: {exc}"
    )


class GpuProber:
    """NVML for one machine's GPUs. NVML starts at the first inspection (again at the next
    one while it cannot) and stays up: the Xid event set must outlive an inspection to hold
    the events between two. Thread-safe; :meth:`close` shuts NVML down."""

    def __init__(self, nvml: NvmlLibrary | None = None) -> None:
        self.nvml: NvmlLibrary = nvml if nvml is not None else pynvml
        self._lock = threading.Lock()
        self._started = False
        self._events: Any = None
        self._xid_unavailable: dict[int, str] = {}
        """Device index -> why its Xid events cannot be read."""
        self._events_unavailable = ""

    def inspect(
        self, nodes: Mapping[str, Sequence[str]], *, virtual: Collection[str] = ()
    ) -> dict[str, list[Finding]]:
        """The GPU findings of each node: ``nodes`` maps a node to its NVIDIA devices (as
        CUDA_VISIBLE_DEVICES names them: index or UUID); ``virtual`` names nodes whose GPUs
        are virtual (no device behind them)."""
        with self._lock:
            failure = self._start()
            if failure is not None:
                return {n: self._without_nvml(failure, devices) for n, devices in nodes.items()} | {
                    n: _all_gpu(ProbeStatus.NOT_AVAILABLE, f"no NVIDIA driver ({failure})")
                    for n in virtual
                }
            xids, strays, drain_error = self._drain()
            found: dict[str, list[Finding]] = {}
            for node, devices in nodes.items():
                found[node] = []
                for device in devices:
                    found[node] += self._device(device, xids, drain_error)
                found[node] += [_xid_finding(None, code, n) for code, n in strays.items()]
            for node in virtual:
                found[node] = _all_gpu(
                    ProbeStatus.NOT_AVAILABLE, "virtual GPUs: no device stands behind them"
                )
            return found

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Free the event set and shut NVML down, unless an inspection still holds it after
        ``timeout`` seconds (an NVML call on a failing GPU can hang): a pool that stops must
        not hang with it, and the process's exit releases NVML anyway."""
        if not self._lock.acquire(timeout=timeout):
            return
        try:
            if not self._started:
                return
            with contextlib.suppress(pynvml.NVMLError):
                if self._events is not None:
                    self.nvml.nvmlEventSetFree(self._events)
                self.nvml.nvmlShutdown()
            self._started, self._events = False, None
        finally:
            self._lock.release()

    # -- NVML -----------------------------------------------------------------------------

    def _start(self) -> str | None:
        """Start NVML and register for Xid events; why it cannot start, or None."""
        if self._started:
            return None
        try:
            self.nvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return str(exc)
        self._started = True
        self._xid_unavailable = {}
        try:
            self._events = self.nvml.nvmlEventSetCreate()
            count = self.nvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self._events, self._events_unavailable = None, str(exc)
            return None
        for index in range(count):
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                self.nvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, self._events
                )
            except pynvml.NVMLError as exc:
                self._xid_unavailable[index] = str(exc)
                code = getattr(exc, "value", None)
                if code in _NOT_AVAILABLE:
                    self._xid_unavailable[index] = _NOT_AVAILABLE[code]
        return None

    def _without_nvml(self, failure: str, devices: Sequence[str]) -> list[Finding]:
        if not devices:
            return _all_gpu(ProbeStatus.NOT_AVAILABLE, f"no NVIDIA driver ({failure})")
        return _all_gpu(
            ProbeStatus.CRITICAL,
            f"NVML cannot start ({failure}), yet the node's {len(devices)} GPU(s) were found "
            "through it: the driver has gone away",
        )

    def _drain(self) -> tuple[dict[int, Counter[int]], Counter[int], str]:
        """The Xid events since the last call, per device index; those of no known device;
        and why reading them stopped early (empty when it did not)."""
        xids: dict[int, Counter[int]] = {}
        strays: Counter[int] = Counter()
        if self._events is None:
            return xids, strays, ""
        for _ in range(MAX_EVENTS):
            try:
                event = self.nvml.nvmlEventSetWait(self._events, 0)
            except pynvml.NVMLError as exc:
                if getattr(exc, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                    return xids, strays, ""  # no more events
                return xids, strays, f"reading Xid events: NVML error: {exc}"
            if not event.eventType & pynvml.nvmlEventTypeXidCriticalError:
                continue
            code = int(event.eventData)
            try:
                index = self.nvml.nvmlDeviceGetIndex(event.device)
            except pynvml.NVMLError:
                strays[code] += 1
                continue
            xids.setdefault(index, Counter())[code] += 1
        return xids, strays, f"more than {MAX_EVENTS} events at once; the rest wait"

    def _device(
        self, device: str, xids: Mapping[int, Counter[int]], drain_error: str
    ) -> list[Finding]:
        try:
            if device.isdigit():
                handle = self.nvml.nvmlDeviceGetHandleByIndex(int(device))
            else:
                handle = self.nvml.nvmlDeviceGetHandleByUUID(device)
            index = self.nvml.nvmlDeviceGetIndex(handle)
        except pynvml.NVMLError as exc:
            return [_error_finding(p, device, exc, "opening the GPU") for p in GPU_PROBES]
        return [
            _guarded(Probe.GPU_TEMPERATURE, device, lambda: self._temperature(handle, device)),
            _guarded(Probe.GPU_ECC, device, lambda: self._ecc(handle, device)),
            _guarded(Probe.GPU_RETIRED_PAGES, device, lambda: self._retired(handle, device)),
            *self._xids(index, device, xids.get(index, Counter()), drain_error),
        ]

    # -- the probes -----------------------------------------------------------------------

    def _temperature(self, handle: Any, gpu: str) -> Finding:
        nvml = self.nvml
        try:
            temperature = nvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        except pynvml.NVMLError as exc:
            return _error_finding(Probe.GPU_TEMPERATURE, gpu, exc, "reading the temperature")
        slowdown = self._threshold(handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        shutdown = self._threshold(handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
        limits = (
            f"slowdown at {slowdown or DEFAULT_SLOWDOWN} °C, shutdown at "
            f"{shutdown or DEFAULT_SHUTDOWN} °C"
            + ("" if slowdown and shutdown else " (defaults: NVML gave no thresholds)")
        )
        slowdown, shutdown = slowdown or DEFAULT_SLOWDOWN, shutdown or DEFAULT_SHUTDOWN
        if temperature >= shutdown - SHUTDOWN_MARGIN:
            status, what = ProbeStatus.CRITICAL, "about to shut down"
        elif temperature >= slowdown:
            status, what = ProbeStatus.WARNING, "throttling"
        else:
            status, what = ProbeStatus.OK, "normal"
        return Finding(
            probe=Probe.GPU_TEMPERATURE,
            gpu=gpu,
            status=status,
            value=int(temperature),
            message=f"{temperature} °C, {what} ({limits})",
        )

    def _threshold(self, handle: Any, which: int) -> int | None:
        try:
            value = int(self.nvml.nvmlDeviceGetTemperatureThreshold(handle, which))
        except pynvml.NVMLError:
            return None
        return value or None

    def _ecc(self, handle: Any, gpu: str) -> Finding:
        nvml, uncorrected = self.nvml, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        try:
            volatile = int(
                nvml.nvmlDeviceGetTotalEccErrors(handle, uncorrected, pynvml.NVML_VOLATILE_ECC)
            )
        except pynvml.NVMLError as exc:
            return _error_finding(Probe.GPU_ECC, gpu, exc, "ECC error counts")
        try:
            aggregate: int | None = int(
                nvml.nvmlDeviceGetTotalEccErrors(handle, uncorrected, pynvml.NVML_AGGREGATE_ECC)
            )
        except pynvml.NVMLError:
            aggregate = None
        life = "unknown" if aggregate is None else str(aggregate)
        counts = f"{volatile} uncorrected since the driver loaded, {life} in the GPU's life"
        if volatile > 0:
            status, advice = ProbeStatus.CRITICAL, ": its memory may be corrupt until a reset"
        elif aggregate is not None and aggregate > AGGREGATE_ECC_LIMIT:
            status, advice = (
                ProbeStatus.WARNING,
                f": over {AGGREGATE_ECC_LIMIT} in its life, consider an RMA",
            )
        else:
            status, advice = ProbeStatus.OK, ""
        return Finding(
            probe=Probe.GPU_ECC, gpu=gpu, status=status, value=volatile, message=counts + advice
        )

    def _retired(self, handle: Any, gpu: str) -> Finding:
        nvml = self.nvml
        try:
            pending = nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
            retired = sum(
                len(nvml.nvmlDeviceGetRetiredPages(handle, cause))
                for cause in (
                    pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                    pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
                )
            )
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) == pynvml.NVML_ERROR_NOT_SUPPORTED:
                return self._remapped_rows(handle, gpu)
            return _error_finding(Probe.GPU_RETIRED_PAGES, gpu, exc, "retired pages")
        is_pending = pending == pynvml.NVML_FEATURE_ENABLED
        if is_pending:
            status, why = ProbeStatus.CRITICAL, "; a retirement is pending: reset the GPU"
        elif retired > RETIRED_PAGES_LIMIT:
            status, why = ProbeStatus.CRITICAL, f"; over {RETIRED_PAGES_LIMIT}"
        else:
            status, why = ProbeStatus.OK, ""
        return Finding(
            probe=Probe.GPU_RETIRED_PAGES,
            gpu=gpu,
            status=status,
            value="pending" if is_pending else retired,
            message=f"{retired} page(s) retired{why}",
        )

    def _remapped_rows(self, handle: Any, gpu: str) -> Finding:
        """GPUs that remap rows instead of retiring pages (Ampere on)."""
        try:
            corrected, uncorrected, pending, failed = self.nvml.nvmlDeviceGetRemappedRows(handle)
        except pynvml.NVMLError as exc:
            return _error_finding(
                Probe.GPU_RETIRED_PAGES, gpu, exc, "retired pages and row remapping"
            )
        remapped = corrected + uncorrected
        rows = f"row remapping: {remapped} row(s) remapped ({uncorrected} uncorrectable)"
        value: int | str = remapped
        if failed:
            status, why, value = ProbeStatus.CRITICAL, "; a remapping failed: service it", "failed"
        elif pending:
            status, why, value = (
                ProbeStatus.CRITICAL,
                "; a remapping is pending: reset it",
                "pending",
            )
        else:
            status, why = ProbeStatus.OK, ""
        return Finding(
            probe=Probe.GPU_RETIRED_PAGES, gpu=gpu, status=status, value=value, message=rows + why
        )

    def _xids(self, index: int, gpu: str, codes: Counter[int], drain_error: str) -> list[Finding]:
        if self._events is None or index in self._xid_unavailable:
            why = self._xid_unavailable.get(index) or self._events_unavailable
            return [
                Finding(
                    probe=Probe.GPU_XID,
                    gpu=gpu,
                    status=ProbeStatus.NOT_AVAILABLE,
                    message=f"Xid events: {why}",
                )
            ]
        found = [_xid_finding(gpu, code, n) for code, n in sorted(codes.items())]
        if not found:
            found.append(
                Finding(
                    probe=Probe.GPU_XID,
                    gpu=gpu,
                    status=ProbeStatus.WARNING if drain_error else ProbeStatus.OK,
                    message=drain_error or "no Xid since the last inspection",
                )
            )
        return found


def _xid_finding(gpu: str | None, code: int, times: int) -> Finding:
    application = xid_is_application(code)
    what = (
        "an application error, the GPU is healthy"
        if application
        else "node-critical, the GPU needs attention"
    )
    return Finding(
        probe=Probe.GPU_XID,
        gpu=gpu,
        status=ProbeStatus.WARNING if application else ProbeStatus.CRITICAL,
        value=code,
        message=f"{xid_name(code)}{f' x{times}' if times > 1 else ''}: {what}",
        event=True,
    )


def _all_gpu(status: ProbeStatus, message: str) -> list[Finding]:
    """One finding per GPU probe for a node whose GPUs could not be reached."""
    return [Finding(probe=p, status=status, message=message) for p in GPU_PROBES]


def _guarded(probe: Probe, gpu: str, look: Callable[[], Finding]) -> Finding:
    try:
        return look()
    except Exception as exc:  # an odd answer must not hide the other GPUs' findings
        return Finding(
            probe=probe,
            gpu=gpu,
            status=ProbeStatus.WARNING,
            message=f"the probe failed: {type(exc).__name__}: {exc}",
        )
