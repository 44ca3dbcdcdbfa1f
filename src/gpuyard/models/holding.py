"""What a job's placement holds, read from the placement as stored: one rule for the job views
(`gpuyard ls`, `show`, the API), the web's job list and `gpuyard top`.

A worker of a multi-node job takes its node whole (docs/scheduling.md, "Whole nodes"): it uses
the GPUs its slot lists, but it *holds* every GPU of the node, since nothing else is placed
there. When the job starts, the controller writes the node's GPU count into each exclusive
slot (``held_gpus``), so what is shown is what the scheduler gave, not a rule applied again
later. A slot stored before that field existed holds what it lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["gpus_text", "held_gpus", "held_suffix", "slot_held_gpus"]


def slot_held_gpus(slot: Mapping[str, Any]) -> int:
    """The GPUs one stored slot holds on its node."""
    held = slot.get("held_gpus")
    return int(held) if held is not None else len(slot.get("gpus") or ())


def held_gpus(placement: Iterable[Mapping[str, Any]] | None) -> int | None:
    """The GPUs a stored placement holds in all; None when the job holds no placement."""
    slots = list(placement or ())
    return sum(slot_held_gpus(s) for s in slots) if slots else None


def held_suffix(requested: int | None, held: int | None) -> str:
    """`` (8 held)`` where a job holds more GPUs than it asked for (or what it asked for cannot
    be read); else nothing."""
    if held is not None and (requested is None or held > requested):
        return f" ({held} held)"
    return ""


def gpus_text(requested: int | None, held: int | None) -> str:
    """``2``, or ``2 (8 held)`` where the job holds more GPUs than it asked for; ``?`` for a
    request that cannot be read."""
    return ("?" if requested is None else str(requested)) + held_suffix(requested, held)
