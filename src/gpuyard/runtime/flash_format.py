"""The checkpoint service's files: one rank's part of one step, and where parts are kept.

The standard library only: the persister (`gpuyard.runtime.persister`) and the platform's
listing (`services/checkpoints.py`) read these files without torch. docs/checkpoints.md
describes the layout in words.

A *part* is one rank's state at one step, in one file::

    prefix (56 bytes): magic (8) | header length (8) | data offset (8) | sequence (8) |
                       step (8) | rank (4) | world (4) | time (8)
    header: JSON (step, rank, world, time, the state's tree, each tensor's dtype/shape/offset)
    data: each tensor's bytes, at the offsets the header names (64-byte aligned)

A writer clears the magic first and writes it last, so a part whose magic is there is whole;
its sequence number changes with every save, so a reader that copies a part while the writer
reuses the file sees the sequence change and drops its copy.

In node memory a rank keeps two *slots* (``rank-R.slot-0|1``) and writes each save into the
one not holding its latest step; on storage each step is a directory of parts
(``gpuyard-flash/step-0000000042/rank-0.gyc``), complete when every rank's part is there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FLASH_DIR",
    "MAGIC",
    "PINNED",
    "PREFIX",
    "Part",
    "StoredStep",
    "read_part",
    "slot_path",
    "step_dir",
    "stored_steps",
]

MAGIC = b"GYCKPT01"
PREFIX = struct.Struct("<8sQQQqiid")
ALIGN = 64
DATA_ALIGN = 4096
FLASH_DIR = "gpuyard-flash"
"""Below the job's checkpoint directory: the parts on storage, and each rank's memory index."""
PINNED = "pinned"
_STEP_DIR = re.compile(r"^step-(\d{10})$")
_PART = re.compile(r"^rank-(\d{1,6})\.gyc$")
MAX_HEADER = 256 << 20
MAX_ENTRIES = 100_000
"""Entries of one directory looked at (a job's files may be many; a listing stays short)."""
MAX_STEPS = 2_000
"""Step directories read, the newest (a listing shows 1,000; the retention keeps few)."""
MAX_PARTS = 250_000
"""Entries of step directories read in all, per look at storage."""


@dataclass(frozen=True, slots=True)
class Part:
    """One rank's part, as its prefix and header say."""

    step: int
    rank: int
    world: int
    time: float
    sequence: int
    data_offset: int
    size: int
    """Bytes of the whole part (prefix, header and data)."""
    header: dict[str, Any] | None
    """None when only the prefix was read (a listing)."""


def align(value: int, to: int = ALIGN) -> int:
    return (value + to - 1) // to * to


def slot_path(memory_dir: Path, rank: int, slot: int) -> Path:
    return memory_dir / f"rank-{rank}.slot-{slot}"


def step_dir(checkpoint_dir: Path, step: int) -> Path:
    return checkpoint_dir / FLASH_DIR / f"step-{step:010d}"


def part_name(rank: int) -> str:
    return f"rank-{rank}.gyc"


def read_part(path: Path, *, header: bool = True) -> Part | None:
    """The part at `path` when it is whole (its magic set, its header readable), else None.

    The file is opened without following a link or blocking (a job's files may be anything),
    and must be a regular file; `header` False reads the prefix only (what a listing needs).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as file:
            part = read_prefix(file.read(PREFIX.size), file if header else None)
        return part if part is not None and part.size <= info.st_size else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        os.close(fd)


def read_prefix(prefix: bytes, file: Any) -> Part | None:
    """Parse a part from its first bytes, and its header from `file` (positioned after them)
    unless `file` is None."""
    if len(prefix) < PREFIX.size:
        return None
    magic, length, offset, sequence, step, rank, world, when = PREFIX.unpack(prefix)
    if magic != MAGIC or length > MAX_HEADER or min(step, rank, world) < 0:
        return None
    header = None
    if file is not None:
        header = json.loads(file.read(length))
        if not isinstance(header, dict) or header.get("step") != step:
            return None
    return Part(
        step=step,
        rank=rank,
        world=world,
        time=when,
        sequence=sequence,
        data_offset=offset,
        size=offset + int(header["data_bytes"]) if header else offset,
        header=header,
    )


def encode_prefix(
    header_length: int,
    data_offset: int,
    sequence: int,
    *,
    step: int,
    rank: int,
    world: int,
    when: float,
) -> bytes:
    return PREFIX.pack(MAGIC, header_length, data_offset, sequence, step, rank, world, when)


@dataclass(frozen=True, slots=True)
class StoredStep:
    """A step on storage: which ranks' parts are there, of how many."""

    step: int
    path: Path
    ranks: frozenset[int]
    world: int
    time: float
    size: int
    pinned: bool

    @property
    def complete(self) -> bool:
        return self.world > 0 and self.ranks == frozenset(range(self.world))


def stored_steps(checkpoint_dir: Path) -> list[StoredStep]:
    """The newest :data:`MAX_STEPS` step directories on storage, oldest first, their parts
    read within a budget of :data:`MAX_PARTS` entries in all; links are not followed."""
    root = checkpoint_dir / FLASH_DIR
    found = []
    for entry in _entries(root):
        match = _STEP_DIR.match(entry.name)
        if match is not None and entry.is_dir(follow_symlinks=False):
            found.append((int(match.group(1)), Path(entry.path)))
    budget = [MAX_PARTS]
    newest = sorted(found, reverse=True)[:MAX_STEPS]
    return sorted((_stored(step, path, budget) for step, path in newest), key=lambda s: s.step)


def _stored(step: int, path: Path, budget: list[int]) -> StoredStep:
    ranks, worlds, size, newest = set(), set(), 0, 0.0
    pinned = False
    for entry in _entries(path):
        budget[0] -= 1
        if budget[0] < 0:
            break
        if entry.name == PINNED:
            pinned = True
            continue
        match = _PART.match(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        part = read_part(Path(entry.path), header=False)
        if part is None or part.step != step or part.rank != int(match.group(1)):
            continue
        ranks.add(part.rank)
        worlds.add(part.world)
        with contextlib.suppress(OSError):
            size += entry.stat(follow_symlinks=False).st_size
        newest = max(newest, part.time)
    world = worlds.pop() if len(worlds) == 1 else 0
    return StoredStep(step, path, frozenset(ranks), world, newest, size, pinned)


def _entries(directory: Path) -> Iterator[os.DirEntry[str]]:
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for number, entry in enumerate(entries):
            if number >= MAX_ENTRIES:
                return
            yield entry


def memory_index(checkpoint_dir: Path, rank: int) -> Path:
    """Where rank `rank` says which steps its node's memory holds (for listings)."""
    return checkpoint_dir / FLASH_DIR / "memory" / f"rank-{rank}.json"
