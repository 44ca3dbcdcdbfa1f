"""The in-job environment contract, read into one immutable value (docs/preemption.md).

Nothing here runs at import time: a script may change its environment before it first uses
the runtime, and tests build a `JobEnvironment` from a plain mapping.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_CHECKPOINT_DIRNAME",
    "EXIT_NO_RESTART",
    "EXIT_SUSPENDED",
    "ContractError",
    "JobEnvironment",
]

EXIT_SUSPENDED = 75
"""Suspended: requeue, no penalty (sysexits' EX_TEMPFAIL)."""

EXIT_NO_RESTART = 76
"""Do not restart, whatever the restart policy says."""

DEFAULT_CHECKPOINT_DIRNAME = "checkpoints"
"""Outside gpuyard the checkpoint dir is ``./checkpoints`` under the working directory."""

_DEFAULT_SIGNAL = "SIGUSR1"


class ContractError(ValueError):
    """A ``GPUYARD_*`` variable holds a value the contract does not allow.

    The platform never sets such values; a user who sets one by hand (to test a script) gets
    this error, naming the variable and what it should hold, the first time the runtime is used.
    """


@dataclass(frozen=True, slots=True)
class JobEnvironment:
    """What the platform told this process, or the defaults a script sees outside gpuyard."""

    attempt: int
    """0, then one more for each resume or restart."""
    resume: bool
    """Whether this attempt continues from the job's checkpoint (``GPUYARD_RESUME``, default
    1): 0 after a fault restart of a job whose recovery is ``restart`` (from scratch)."""
    checkpoint_dir: Path
    """The job's checkpoint directory, the same for every attempt."""
    control_dir: Path | None
    """This worker's control directory; None outside gpuyard (no platform to talk to)."""
    preempt_signal: signal.Signals
    """The notice signal the platform sends to registered listeners."""
    simulate_after: float | None
    """Seconds after the first poll at which a simulated notice arrives (attempt 0 only)."""
    rank: int | None
    """This process's global rank when a launcher says so (torchrun, mpirun), else None."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, cwd: Path) -> JobEnvironment:
        """Read the contract from `environ`; relative defaults are taken under `cwd`."""
        control = environ.get("GPUYARD_CONTROL_DIR") or None
        checkpoints = environ.get("GPUYARD_CHECKPOINT_DIR") or None
        return cls(
            attempt=_attempt(environ.get("GPUYARD_ATTEMPT")),
            resume=_flag("GPUYARD_RESUME", environ.get("GPUYARD_RESUME"), default=True),
            checkpoint_dir=(Path(checkpoints) if checkpoints else cwd / DEFAULT_CHECKPOINT_DIRNAME),
            control_dir=Path(control) if control else None,
            preempt_signal=_signal(environ.get("GPUYARD_PREEMPT_SIGNAL") or _DEFAULT_SIGNAL),
            simulate_after=_seconds(environ.get("GPUYARD_SIMULATE_PREEMPTION_AFTER")),
            rank=_rank(environ),
        )


def _attempt(value: str | None) -> int:
    if value is None or value == "":
        return 0
    try:
        attempt = int(value)
    except ValueError:
        attempt = -1
    if attempt < 0:
        raise ContractError(
            f"GPUYARD_ATTEMPT must be a whole number >= 0, got {value!r}; "
            "unset it outside gpuyard (the runtime then uses 0)"
        )
    return attempt


def _flag(name: str, value: str | None, *, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    if value.strip() in ("0", "1"):
        return value.strip() == "1"
    raise ContractError(f"{name} must be 0 or 1, got {value!r}")


def _signal(name: str) -> signal.Signals:
    """Accept ``SIGUSR1``, ``USR1`` or a number, as ``kill -s`` does."""
    text = name.strip().upper()
    try:
        return signal.Signals(int(text)) if text.isdigit() else signal.Signals[_sig_name(text)]
    except (KeyError, ValueError):
        raise ContractError(
            f"GPUYARD_PREEMPT_SIGNAL must name a signal (for example SIGUSR1), got {name!r}"
        ) from None


def _sig_name(text: str) -> str:
    return text if text.startswith("SIG") else "SIG" + text


def _seconds(value: str | None) -> float | None:
    if value is None or value.strip() == "":
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ContractError(
            "GPUYARD_SIMULATE_PREEMPTION_AFTER must be a number of seconds >= 0 "
            f"(for example 30), got {value!r}"
        )
    return seconds


def _rank(environ: Mapping[str, str]) -> int | None:
    """The process's global rank, where a launcher set one.

    gpuyard itself sets ``RANK`` to the *node* rank for the torch launcher (docs/distributed.md),
    and the launcher then overwrites it with the global rank in each process it starts, next to
    ``LOCAL_RANK``. So ``RANK`` counts only together with ``LOCAL_RANK``.
    """
    candidates = [
        environ.get("RANK") if "LOCAL_RANK" in environ else None,
        environ.get("OMPI_COMM_WORLD_RANK"),
        environ.get("PMI_RANK"),
    ]
    for value in candidates:
        if value is not None and value.strip().isdigit():
            return int(value)
    return None
