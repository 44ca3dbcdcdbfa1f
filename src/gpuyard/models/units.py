"""Fields that accept a quantity as a number or as text ("90s", "2h", "16GiB")."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

from gpuyard.quantities import parse_bytes, parse_duration

__all__ = ["Bytes", "Seconds"]


def _duration(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration(value)
    return value


def _size(value: Any) -> Any:
    if isinstance(value, str):
        return parse_bytes(value)
    return value


Seconds = Annotated[float, BeforeValidator(_duration)]
"""Seconds, from a number or a duration such as ``90s`` or ``2h``."""
Bytes = Annotated[int, BeforeValidator(_size)]
"""Bytes, from a number or a size such as ``16GiB``."""
