"""Parsing and printing of the quantities users type: durations and memory sizes, and the
one way a node's or a request's size is written (``1 GPU, 2 CPUs, 16Gi memory``).

Durations: ``90``/``90s``, ``15m``, ``2h``, ``1d``, and combinations such as ``1h30m``.
Memory: a byte count or a number with a binary suffix, ``512M``, ``4G``, ``4Gi``, ``4GiB``, ``1T``.
As in Slurm, every suffix is a power of 1024, so ``4G`` and ``4Gi`` are the same size.
"""

from __future__ import annotations

import re

__all__ = [
    "counted",
    "format_bytes",
    "format_duration",
    "format_resources",
    "parse_bytes",
    "parse_duration",
]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)$", re.IGNORECASE)
_MEMORY_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``text``; raises ValueError with the accepted forms when it cannot."""
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"a duration cannot be negative (got {text})")
        return float(text)
    raw = text.strip().lower().replace(" ", "")
    pos, total = 0, 0.0
    while pos < len(raw):
        match = _DURATION_PART.match(raw, pos)
        if match is None or match.end() == pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not raw or pos != len(raw):
        raise ValueError(
            f"cannot read {text!r} as a duration; use seconds or a number with a unit, "
            "e.g. 90s, 15m, 2h, 1d or 1h30m"
        )
    return total


def format_duration(seconds: float) -> str:
    """A short human form: ``45s``, ``12m05s``, ``3h20m``, ``2d04h``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def parse_bytes(text: str | int) -> int:
    """Bytes in ``text``; raises ValueError with the accepted forms when it cannot."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a size cannot be negative (got {text})")
        return text
    match = _MEMORY.match(text.strip())
    if match is None:
        raise ValueError(
            f"cannot read {text!r} as a size; use bytes or a number with a unit, "
            "e.g. 512M, 4G, 16Gi (units are powers of 1024)"
        )
    number, unit, _ = match.groups()
    value = float(number) * 1024 ** _MEMORY_POWERS[unit.lower()]
    if value != int(value):
        raise ValueError(
            f"{text!r} is not a whole number of bytes; give a unit (e.g. {number}G) or whole bytes"
        )
    return int(value)


def format_bytes(n: int) -> str:
    """A short binary form: ``512Mi``, ``4Gi``, ``1.5Ti``."""
    if n < 1024:
        return str(n)
    value = float(n)
    units = ["Ki", "Mi", "Gi", "Ti"]
    value /= 1024
    while value >= 1024 and len(units) > 1:
        value /= 1024
        units.pop(0)
    return f"{value:.1f}".rstrip("0").rstrip(".") + units[0]


def counted(n: float, noun: str) -> str:
    """``1 GPU``, ``2 GPUs``, ``0.5 CPUs``: the count and the noun, plural unless exactly one."""
    return f"{n:g} {noun}" if n == 1 else f"{n:g} {noun}s"


def format_resources(gpus: int, cpus: float, memory: int, *, memory_word: str = "memory") -> str:
    """``1 GPU, 2 CPUs, 16Gi memory``. No memory (a request that names none) is left out
    rather than written as ``0 memory``."""
    parts = [counted(gpus, "GPU"), counted(cpus, "CPU")]
    if memory:
        parts.append(f"{format_bytes(memory)} {memory_word}".rstrip())
    return ", ".join(parts)
