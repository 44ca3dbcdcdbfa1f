"""Data preparation's pure rules (docs/datasets.md, "Data preparation"): which copies of
dataset versions a node's data cache drops, and how the phase's progress reads.

A job whose dataset mount says ``prepare: true`` has, before its workers start, each of its
nodes copy the pinned version to the node's fast storage; a copy stays after its last use for
the admin's retention (``GPUYARD_DATA_RETENTION``, default 7 days) and the cache holds at most
``GPUYARD_DATA_CACHE_MAX`` bytes. :func:`to_evict` is the one rule of what goes:

1. a copy pinned by a job that has not ended is never dropped;
2. an unpinned copy unused for the retention or longer is dropped (stale);
3. then, while the copies kept plus ``incoming`` bytes exceed the cap, the least recently
   used unpinned copy is dropped (ties: the larger first, then by key, so the answer is one).

No clock and no I/O: the cache passes ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuyard.models.dataset import Manifest
from gpuyard.models.job import Mount

__all__ = [
    "DEFAULT_CACHE_MAX",
    "DEFAULT_RETENTION",
    "CachedCopy",
    "DataSource",
    "PreparedData",
    "copy_key",
    "copy_version",
    "prepared",
    "preparing",
    "to_evict",
]

DEFAULT_RETENTION = 7 * 86400.0
"""Seconds a copy is kept after its last use, unless the admin says otherwise."""
DEFAULT_CACHE_MAX = 500 << 30
"""Bytes of copies a node keeps, unless the admin says otherwise."""


@dataclass(frozen=True, slots=True)
class CachedCopy:
    """What the rule needs to know of one copy on a node."""

    key: str
    size: int
    last_used: float
    """When a job last began or ended using it (seconds since the epoch)."""
    pinned: bool
    """Whether a job that has not ended uses it."""


def to_evict(
    copies: Iterable[CachedCopy],
    *,
    now: float,
    retention: float,
    max_bytes: int,
    incoming: int = 0,
) -> list[str]:
    """The keys of the copies to drop, stale ones first, then least recently used ones, so
    that what is kept plus ``incoming`` fits ``max_bytes`` where unpinned copies allow."""
    kept: list[CachedCopy] = []
    dropped: list[str] = []
    for copy in copies:
        if not copy.pinned and now - copy.last_used >= retention:
            dropped.append(copy.key)
        else:
            kept.append(copy)
    total = incoming + sum(c.size for c in kept)
    for copy in sorted((c for c in kept if not c.pinned), key=_lru_order):
        if total <= max_bytes:
            break
        dropped.append(copy.key)
        total -= copy.size
    return dropped


def _lru_order(copy: CachedCopy) -> tuple[float, int, str]:
    return (copy.last_used, -copy.size, copy.key)


@dataclass(frozen=True, slots=True)
class DataSource:
    """A pinned dataset version a node is asked to hold a copy of."""

    version_id: int
    ref: str
    """``owner/name@N``, for messages."""
    path: str
    """Where the version's files are (shared storage, or the pool's upload store)."""
    manifest: Manifest
    digest: str

    @property
    def key(self) -> str:
        return copy_key(self.version_id, self.digest)


@dataclass(frozen=True, slots=True)
class PreparedData:
    """A node's copy of a version: where it is, and the bytes copied now (0: reused)."""

    path: str
    copied: int


def copy_key(version_id: int, digest: str) -> str:
    """The name of a version's copy on a node: its id and its manifest's digest, so a
    version whose manifest were ever different could never be taken for this copy."""
    hex_part = digest.removeprefix("sha256:")[:16] or "nodigest"
    return f"v{version_id}-{hex_part}"


def copy_version(key: str) -> int | None:
    """The version id a copy's name (:func:`copy_key`) is of; None for any other name."""
    head, sep, _ = key.partition("-")
    number = head.removeprefix("v")
    if not sep or head == number or not number.isdigit():
        return None
    return int(number)


def prepared(mounts: Iterable[Mount]) -> list[Mount]:
    """The dataset mounts among ``mounts`` that are copied to the job's nodes first: those
    that say ``prepare`` and whose version the pool pinned at submission."""
    return [m for m in mounts if m.prepare and m.dataset_version is not None]


_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def preparing(done: int, total: int) -> str:
    """The phase's progress as a job's reason shows it: ``preparing data: 3.1 of 12 GiB``
    (both in the total's unit)."""
    name, size = next(((n, s) for n, s in _UNITS if total >= s), ("bytes", 1))
    if size == 1:
        return f"preparing data: {done} of {total} bytes"
    return f"preparing data: {_short(done / size)} of {_short(total / size)} {name}"


def _short(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")
