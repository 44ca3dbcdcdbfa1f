"""Log signatures of training faults, and the root cause of a failed job across its ranks.

A matching line is an *observation*, not a verdict (NVRx's pattern registry rule; see
docs/references.md, "Fault signatures and Xids"). Observations are of two kinds:

- **roots**: something went wrong *here* (a CUDA fault, an Xid, an out-of-memory kill, a
  segfault, a data read error, a NaN loss, the user's own exception);
- **cascades**: the fallout elsewhere of a root (a collective that timed out because a peer
  died, a watchdog abort, a closed connection).

:func:`diagnose` picks the earliest root across all ranks, and only without any root the
earliest cascade, so a job whose rank 3 hit an illegal memory access is reported as that —
"rank 3 on node1: CUDA fatal error (an illegal memory access …)" — not as the NCCL timeout that
rank 0 printed a minute later. Advice lines that merely mention a fault
(``CUDA_LAUNCH_BLOCKING=1``, "might be asynchronously reported") are never observations.

Each signature says what the fault suggests (:class:`Suspect`): the **node** (hardware: retry
elsewhere after a re-check), the **job's** own code or data (do not retry by default), or
**unknown** (a cascade without its root). Xid codes are split as docs/references.md says:
application Xids (13, 31, 43, 45, 68, and 63, 92, 109 per Meta's GCM) versus node-critical ones;
the set lives in :mod:`gpuyard.models.health`, shared with the executors' node inspection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuyard.models.health import APPLICATION_XIDS, xid_is_application

__all__ = [
    "APPLICATION_XIDS",
    "SIGNATURES",
    "Cause",
    "Diagnosis",
    "Observation",
    "Signature",
    "Suspect",
    "diagnose",
    "observe",
    "scan",
    "xid_suspect",
]


class Suspect(StrEnum):
    NODE = "node"
    """The machine: re-check it, and run the job elsewhere if it fails the check."""
    JOB = "job"
    """The job's own code, data or settings: retrying on other nodes will not help."""
    UNKNOWN = "unknown"
    """A symptom without its cause (a cascade seen alone)."""


class Cause(StrEnum):
    XID = "xid"
    GPU_HARDWARE = "gpu-hardware"
    CUDA_FATAL = "cuda-fatal"
    GPU_OOM = "gpu-oom"
    HOST_OOM = "host-oom"
    KILLED = "killed"
    CRASH = "crash"
    DATA_IO = "data-io"
    NAN = "nan"
    APPLICATION = "application"
    NCCL_TIMEOUT = "nccl-timeout"
    NCCL_WATCHDOG = "nccl-watchdog"
    COLLECTIVE = "collective"
    GLOO_TIMEOUT = "gloo-timeout"
    PEER_GONE = "peer-gone"
    WORKER_FAILED = "worker-failed"


@dataclass(frozen=True, slots=True)
class Signature:
    cause: Cause
    pattern: re.Pattern[str]
    root: bool
    suspect: Suspect
    title: str
    """How an event names it: "CUDA fatal error", "GPU out of memory", …"""


def _sig(cause: Cause, pattern: str, *, root: bool, suspect: Suspect, title: str) -> Signature:
    return Signature(cause, re.compile(pattern, re.IGNORECASE), root, suspect, title)


_XID = re.compile(r"NVRM: Xid \(([^)]+)\): (\d+)")

# Order matters where a line could match two: the more specific first. Roots before cascades.
SIGNATURES: tuple[Signature, ...] = (
    _sig(
        Cause.XID,
        _XID.pattern,
        root=True,
        suspect=Suspect.NODE,  # refined by xid_suspect
        title="GPU Xid",
    ),
    _sig(
        Cause.GPU_HARDWARE,
        r"ECC.{0,40}(?:uncorrectable|\bDBE\b)|GPU.{0,40}(?:off the bus|fallen off)"
        r"|NVLink.{0,24}(?:link down|uncorrectable(?: error)?|CRC error|recovery failed)"
        r"|PCIe.{0,24}(?:AER(?: fatal)?|link down|fatal error|uncorrectable(?: error)?)"
        r"|Got completion with error",
        root=True,
        suspect=Suspect.NODE,
        title="GPU or interconnect hardware error",
    ),
    _sig(
        Cause.APPLICATION,
        r"CUDA error: device-side assert triggered|\.cu:\d+: .*Assertion .* failed",
        root=True,
        suspect=Suspect.JOB,  # an index out of range in the model's code, not the GPU
        title="CUDA device-side assert (the job's code)",
    ),
    _sig(
        Cause.CUDA_FATAL,
        r"CUDA error: (?:an illegal memory access|unspecified launch failure"
        r"|an illegal instruction|uncorrectable ECC error|uncorrectable NVLink error)"
        r"|CUBLAS_STATUS_EXECUTION_FAILED when calling",
        root=True,
        suspect=Suspect.NODE,
        title="CUDA fatal error",
    ),
    _sig(
        Cause.GPU_OOM,
        r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED",
        root=True,
        suspect=Suspect.JOB,
        title="GPU out of memory",
    ),
    _sig(
        Cause.HOST_OOM,
        r"(?:Out of memory|Memory cgroup out of memory): Kill(?:ed)? process"
        r"|Detected \d+ oom[_-]kill events?",
        root=True,
        suspect=Suspect.JOB,
        title="host out of memory",
    ),
    _sig(
        Cause.KILLED,
        # torchrun's report of a rank killed by SIGKILL: the host's OOM killer most often, but
        # a SIGKILL alone proves nothing (an agent, a person, a failing node): not the job's.
        r"exitcode\s*:\s*-9\b|signal 9 \(SIGKILL\) received by PID",
        root=True,
        suspect=Suspect.UNKNOWN,
        title="killed by SIGKILL (the host's OOM killer, often)",
    ),
    _sig(
        Cause.DATA_IO,
        r"DataLoader timed out after \d+ seconds"
        r"|DataLoader worker \(pid \d+\) is killed by signal"
        r"|Input/output error|Stale file handle|No space left on device|I/O error, dev \w+"
        r"|PytorchStreamWriter failed writing",
        root=True,
        suspect=Suspect.NODE,
        title="data I/O error",
    ),
    _sig(
        Cause.CRASH,
        r"segmentation fault|\bsegfault\b|\bSIGSEGV\b|core dumped|Fatal Python error: Aborted"
        r"|exitcode\s*:\s*-11\b",
        root=True,
        suspect=Suspect.NODE,
        title="process crashed",
    ),
    _sig(
        Cause.NAN,
        r"\b(?:loss|grad(?:ient)?(?:[ _]norm)?)\b\s*(?:(?:is|=|:)\s*)?[-+]?(?:nan|inf)\b"
        r"|non[- ]finite (?:loss|value|gradient)"
        r"|Minimum loss scale reached|loss scale already at minimum",
        root=True,
        suspect=Suspect.JOB,
        title="loss or gradient is not finite",
    ),
    _sig(
        Cause.NCCL_TIMEOUT,
        r"Watchdog caught collective operation timeout",
        root=False,
        suspect=Suspect.UNKNOWN,
        title="NCCL collective timed out",
    ),
    _sig(
        Cause.NCCL_WATCHDOG,
        r"ProcessGroupNCCL's watchdog got stuck|Heartbeat monitor timed out",
        root=False,
        suspect=Suspect.UNKNOWN,
        title="NCCL watchdog stuck",
    ),
    _sig(
        Cause.GLOO_TIMEOUT,
        r"Timed out waiting \d+ms for (?:recv|send) operation to complete",
        root=False,
        suspect=Suspect.UNKNOWN,
        title="gloo collective timed out",
    ),
    _sig(
        Cause.PEER_GONE,
        r"Connection (?:closed|reset) by (?:remote )?peer|DistNetworkError"
        r"|RendezvousConnectionError",
        root=False,
        suspect=Suspect.UNKNOWN,
        title="a peer went away",
    ),
    _sig(
        Cause.COLLECTIVE,
        r"Some NCCL operations have failed or timed out|NCCL WARN .*(?:fail|error)"
        r"|unhandled system error|ncclInternalError|ncclSystemError|NCCL error in:"
        r"|we are taking the entire process down"
        r"|Exception \(either an error or timeout\) detected by watchdog",
        root=False,
        suspect=Suspect.UNKNOWN,
        title="NCCL error",
    ),
    _sig(
        Cause.WORKER_FAILED,
        r"\bChildFailedError\b",
        root=False,
        suspect=Suspect.UNKNOWN,
        title="a worker process failed (torchrun)",
    ),
)

_ADVICE = re.compile(
    r"CUDA_LAUNCH_BLOCKING|TORCH_USE_CUDA_DSA|might be asynchronously reported"
    r"|compile with .TORCH_USE_CUDA_DSA|for debugging consider passing"
    # A Python warning, or a client that retries, has not failed (yet).
    r"|\b[A-Z]\w*Warning: |retrying \(try=",
    re.IGNORECASE,
)
"""Lines that mention a fault to advise on it, in every CUDA error's traceback."""

_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception))(?::\s?(.*))?$")
"""The last line of a Python traceback: ``KeyError: 'labels'``, ``torch.x.SomeError: …``."""


@dataclass(frozen=True, slots=True)
class Observation:
    cause: Cause
    root: bool
    suspect: Suspect
    title: str
    line: str
    rank: int = 0
    node: str = ""
    at: float = 0.0
    """When it was seen (seconds, any common clock); ties keep log order."""
    seq: int = 0
    """Its line number in its log."""

    def describe(self) -> str:
        where = f"rank {self.rank}" + (f" on {self.node}" if self.node else "")
        return f"{where}: {self.title} ({_short(self.line)})"


def xid_suspect(code: int) -> Suspect:
    """An application Xid leaves the GPU healthy; any other takes the node out (the rule is
    :func:`gpuyard.models.health.xid_is_application`, which the node inspection uses too)."""
    return Suspect.JOB if xid_is_application(code) else Suspect.NODE


MAX_LINE = 2000
"""Characters of a line the signatures look at: a job writes its log, and a line of megabytes
must not cost the controller more than one of ordinary length."""

_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Terminal escape sequences and control characters: a job's text must not reach an admin's
terminal through an event as anything but plain characters."""


def observe(line: str) -> Signature | None:
    """The signature ``line`` matches first, or None (advice lines match none)."""
    text = line[:MAX_LINE].strip()
    if not text or _ADVICE.search(text):
        return None
    return next((sig for sig in SIGNATURES if sig.pattern.search(text)), None)


def scan(
    lines: Iterable[str], *, rank: int = 0, node: str = "", at: float = 0.0
) -> list[Observation]:
    """Every observation in one worker's log, in order. A Python traceback's final exception
    line counts as an application root unless a signature matched inside the traceback."""
    found: list[Observation] = []
    in_traceback = False
    traceback_matched = False
    for seq, raw in enumerate(lines):
        line = _ESCAPES.sub("", raw[:MAX_LINE].rstrip("\n"))
        if line.startswith("Traceback (most recent call last):"):
            in_traceback, traceback_matched = True, False
            continue
        signature = observe(line)
        if signature is not None:
            suspect, title = signature.suspect, signature.title
            if signature.cause is Cause.XID:
                match = _XID.search(line)
                code = int(match.group(2)) if match else -1
                suspect = xid_suspect(code)
                title = f"GPU Xid {code} ({'application' if suspect is Suspect.JOB else 'node'})"
            found.append(
                Observation(
                    signature.cause,
                    signature.root,
                    suspect,
                    title,
                    line.strip(),
                    rank,
                    node,
                    at,
                    seq,
                )
            )
            traceback_matched = traceback_matched or in_traceback
            continue
        if in_traceback and not line.startswith((" ", "\t")):
            match = _EXCEPTION.match(line.strip())
            if match and not traceback_matched:
                found.append(
                    Observation(
                        Cause.APPLICATION,
                        True,
                        Suspect.JOB,
                        f"Python exception {match.group(1)}",
                        line.strip(),
                        rank,
                        node,
                        at,
                        seq,
                    )
                )
            if match or not line.strip():
                in_traceback = False
    return found


@dataclass(frozen=True, slots=True)
class Diagnosis:
    cause: Observation | None
    """The earliest root across ranks, else the earliest cascade; None: nothing recognised."""
    suspect: Suspect
    observations: tuple[Observation, ...]

    def summary(self) -> str:
        if self.cause is None:
            return "no known fault signature in the logs"
        return self.cause.describe()


def diagnose(observations: Sequence[Observation]) -> Diagnosis:
    """The root cause of a failure from every rank's observations (see the module's text)."""
    ordered = tuple(sorted(observations, key=lambda o: (o.at, o.rank, o.seq)))
    roots = [o for o in ordered if o.root]
    cause = roots[0] if roots else (ordered[0] if ordered else None)
    suspect = cause.suspect if cause is not None else Suspect.UNKNOWN
    return Diagnosis(cause, suspect, ordered)


def _short(line: str, width: int = 160) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"
