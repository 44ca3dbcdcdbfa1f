"""The control directory: files the platform and the runtime exchange (docs/preemption.md).

Every file is JSON written whole to a temporary name in the same directory and renamed into
place, so a reader (the platform, or another rank of the same worker) never sees half of one.
The platform polls these files; no fsync is done because they matter only while the machine is
up (checkpoints, which must survive a crash, are written elsewhere with one).
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, SupportsFloat

__all__ = [
    "ACK",
    "CHECKPOINT",
    "LISTENERS",
    "PREEMPT",
    "PROGRESS",
    "SAVING",
    "SUSPENDED",
    "json_number",
    "read_json",
    "register_listener",
    "unregister_listener",
    "write_json",
]

PREEMPT = "preempt.json"
LISTENERS = "listeners"
ACK = "ack.json"
PROGRESS = "progress.json"
CHECKPOINT = "checkpoint.json"
SUSPENDED = "suspended.json"
SAVING = "saving.json"


def write_json(directory: Path, name: str, content: Mapping[str, Any]) -> Path:
    """Write `content` to ``directory/name`` atomically (temporary name, then rename).

    The temporary name carries the pid and thread, so two ranks of one worker (which share a
    control dir under torchrun) or two threads never write to the same temporary file.
    """
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    tmp = directory / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    data = json.dumps(content, sort_keys=True, allow_nan=False) + "\n"
    try:
        tmp.write_text(data, encoding="utf-8")
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return target


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at `path`, or None when it is absent or not a JSON object."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def register_listener(control_dir: Path, pid: int) -> Path:
    """Create ``listeners/<pid>``: this process handles the notice signal; signal it."""
    listeners = control_dir / LISTENERS
    listeners.mkdir(parents=True, exist_ok=True)
    path = listeners / str(pid)
    path.touch()
    return path


def unregister_listener(control_dir: Path, pid: int) -> None:
    """Remove ``listeners/<pid>`` (the platform would skip a dead pid anyway)."""
    with contextlib.suppress(OSError):
        (control_dir / LISTENERS / str(pid)).unlink()


def json_number(value: object) -> int | float | str | None:
    """A metric as JSON can hold it.

    Python and NumPy numbers and 0-d tensors (anything with ``__float__``) become numbers;
    NaN and infinities, which JSON has no numbers for, become the strings ``"nan"``, ``"inf"``
    and ``"-inf"`` so that a diverged loss still shows up; anything else becomes its ``str``.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):  # int, bool, NumPy's integers
        return int(value)
    number = _float(value)
    if number is None:
        return str(value)
    if math.isfinite(number):
        return number
    return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")


def _float(value: object) -> float | None:
    if not isinstance(value, SupportsFloat):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):  # a tensor of several elements
        return None
