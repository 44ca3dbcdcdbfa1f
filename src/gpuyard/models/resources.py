"""``Resources``: GPUs, CPUs and memory as one value, with its arithmetic and its fit rule.

What a worker needs, what a node has, what is free on it and what a running job holds are all
this one type, so "does it fit" is written once. CPUs are counted in thousandths of a core
(millicores, as Kubernetes does): fractions such as 0.1 + 0.2 add up exactly, and no comparison
needs a tolerance. The one rounding rule is at the edge: :meth:`Resources.of` rounds a CPU
amount to the nearest thousandth.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyard.quantities import format_resources

__all__ = ["MILLI", "ZERO", "Resources", "millicpus"]

MILLI = 1000
"""Millicores per CPU."""


def millicpus(cpus: float) -> int:
    """``cpus`` in thousandths of a core, rounded to the nearest (the one rounding rule)."""
    return round(cpus * MILLI)


@dataclass(frozen=True, slots=True, order=True, init=False)
class Resources:
    """Ordered by GPUs, then CPUs, then memory (smallest first)."""

    gpus: int = 0
    mcpus: int = 0
    """CPUs in thousandths of a core."""
    memory: int = 0
    """Bytes."""

    def __init__(self, gpus: int = 0, mcpus: int = 0, memory: int = 0) -> None:
        # A scheduling cycle makes hundreds of thousands of these: setting the slots directly
        # takes half the time of the generated frozen __init__ (object.__setattr__ per field).
        _set_gpus(self, gpus)
        _set_mcpus(self, mcpus)
        _set_memory(self, memory)

    @classmethod
    def of(cls, gpus: int = 0, cpus: float = 0.0, memory: int = 0) -> Resources:
        return cls(gpus, millicpus(cpus), memory)

    @property
    def cpus(self) -> float:
        return self.mcpus / MILLI

    def fits_in(self, room: Resources) -> bool:
        """Whether this much fits in ``room`` (every amount at most the room's)."""
        return self.gpus <= room.gpus and self.mcpus <= room.mcpus and self.memory <= room.memory

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus + other.gpus, self.mcpus + other.mcpus, self.memory + other.memory
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus - other.gpus, self.mcpus - other.mcpus, self.memory - other.memory
        )

    def __str__(self) -> str:
        return format_resources(self.gpus, self.cpus, self.memory)


_set_gpus, _set_mcpus, _set_memory = (
    vars(Resources)[name].__set__ for name in ("gpus", "mcpus", "memory")
)
"""The slots' own setters, which a frozen dataclass's ``__setattr__`` does not go through."""

ZERO = Resources()
"""Nothing."""
