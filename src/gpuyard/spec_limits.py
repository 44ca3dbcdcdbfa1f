"""Words and limits of a job spec that need no models: the Slurm ``sbatch`` command checks its
input with them without loading pydantic and the models (``gpuyard.slurm.quick``), and the
models (``gpuyard.models.job``, ``request``, ``slurm``) take them from here, so each is written
once. Standard library only.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_POOL",
    "MAX_ENV",
    "MAX_ENV_BYTES",
    "MAX_SCRIPT",
    "PRIORITIES",
    "signal_number",
]

MAX_ENV = 256
"""Variables of a job's ``env``."""
MAX_ENV_BYTES = 64 * 1024
"""Bytes of a job's ``env``, names and values."""
MAX_SCRIPT = 256 * 1024
"""Bytes of a batch script (Slurm's default limit is 4 MiB; a script that needs more belongs in
a file the script runs)."""
DEFAULT_POOL = "default"
"""The pool of nodes without a ``pool`` label, and of jobs that name none."""
PRIORITIES = ("low", "normal", "high", "highest")
"""The priority tiers, lowest first (``gpuyard.models.Priority``)."""


def signal_number(name: str) -> int:
    """``USR2``, ``SIGUSR2`` or ``12`` → 12; ValueError naming the choices otherwise."""
    import signal as _signal  # here: sbatch's quick path loads this module, rarely a signal

    text = name.strip().upper()
    if text.isdigit():
        number = int(text)
        if 1 <= number < _signal.NSIG:
            return number
    else:
        if not text.startswith("SIG"):
            text = "SIG" + text
        found = getattr(_signal.Signals, text, None) if text.isidentifier() else None
        if isinstance(found, _signal.Signals):
            return int(found)
    raise ValueError(f"{name!r} is not a signal; give a name such as USR1, USR2, TERM or INT")
