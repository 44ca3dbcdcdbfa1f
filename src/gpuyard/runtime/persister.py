"""The checkpoint service's persister: copies a rank's parts from node memory to storage.

A process of its own beside the trainer (started by `gpuyard.runtime.flash` at its first
save), so that writing to storage never stalls training. The trainer writes one line to its
stdin after each save; the persister copies the newest whole part it has not persisted yet
(older ones a newer save has replaced are skipped: only the newest matters), verifies that the
trainer did not reuse the slot while it copied, writes the copy to a temporary file, syncs it
and renames it into the step's directory; then it drops this rank's parts of steps past the
retention; it also says which steps node memory holds (for `gpuyard checkpoints`) and records
the newest complete step in the worker's ``checkpoint.json`` (the platform's "work saved" for
preemption), so that the trainer's save touches no disk. At the end of its stdin it persists
what is left and exits.

    python -m gpuyard.runtime.persister MEMORY_DIR CHECKPOINT_DIR RANK KEEP [CONTROL_DIR [NODE]]

The standard library only (no torch): it starts in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import BinaryIO

from gpuyard.runtime.atomic import atomic_file
from gpuyard.runtime.control import CHECKPOINT, write_json
from gpuyard.runtime.flash_format import (
    PREFIX,
    Part,
    memory_index,
    part_name,
    read_part,
    read_prefix,
    slot_path,
    step_dir,
    stored_steps,
)

__all__ = ["Persister", "main"]

SLOTS = 2


class Persister:
    """Persists one rank's parts (see the module docstring)."""

    def __init__(
        self,
        memory_dir: Path,
        checkpoint_dir: Path,
        rank: int,
        keep: int,
        *,
        control_dir: Path | None = None,
        node: str = "",
    ) -> None:
        self.memory_dir = memory_dir
        self.checkpoint_dir = checkpoint_dir
        self.rank = rank
        self.keep = max(1, keep)
        self.control_dir = control_dir
        self.node = node
        self._recorded: int | None = None

    def newest(self) -> tuple[Path, Part] | None:
        """The slot holding this rank's newest whole part."""
        parts = [(p, read_part(p)) for p in self._slots()]
        whole = [(p, part) for p, part in parts if part is not None and part.rank == self.rank]
        return max(whole, key=lambda pp: (pp[1].step, pp[1].sequence), default=None)

    def _slots(self) -> list[Path]:
        return [slot_path(self.memory_dir, self.rank, s) for s in range(SLOTS)]

    def persist_newest(self) -> int | None:
        """Persist the newest part unless storage has it already; its step, or None."""
        self.publish_index()
        found = self.newest()
        if found is None:
            return None
        path, part = found
        target = step_dir(self.checkpoint_dir, part.step) / part_name(self.rank)
        if read_part(target) is not None:
            return part.step
        if not self._copy(path, part, target):
            return None
        self.prune()
        self.record()
        return part.step

    def publish_index(self) -> None:
        """Which steps this node's memory holds for this rank (written atomically)."""
        parts = [p for s in self._slots() if (p := read_part(s, header=False)) is not None]
        index = {
            "node": self.node,
            "steps": sorted(p.step for p in parts),
            "world": max((p.world for p in parts), default=0),
            "time": time.time(),
        }
        path = memory_index(self.checkpoint_dir, self.rank)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(index))
            tmp.replace(path)

    def record(self) -> None:
        """The newest complete step on storage, in the worker's ``checkpoint.json``."""
        complete = [s for s in stored_steps(self.checkpoint_dir) if s.complete]
        if self.control_dir is None or not complete or complete[-1].step == self._recorded:
            return
        newest = complete[-1]
        content = {"time": newest.time, "step": newest.step, "path": str(newest.path)}
        with contextlib.suppress(OSError):
            write_json(self.control_dir, CHECKPOINT, content)
            self._recorded = newest.step

    def _copy(self, source: Path, part: Part, target: Path) -> bool:
        """Copy `part` from `source` to `target` atomically; False when the slot was reused."""
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(source, "rb") as src, atomic_file(target) as dst:
                # Shared: the trainer's next save writes the other slot meanwhile.
                fcntl.flock(src.fileno(), fcntl.LOCK_SH)
                if not _unchanged(src, part):
                    raise _Reused
                _copy_range(src, dst, part.size)
                if not _unchanged(src, part):
                    raise _Reused
        except (_Reused, OSError) as exc:
            if isinstance(exc, OSError):
                print(f"gpuyard persister: cannot persist step {part.step}: {exc}", file=sys.stderr)
            return False
        _sync_directory(target.parent)
        return True

    def prune(self) -> None:
        """Drop this rank's parts of steps past the retention: the newest `keep` complete
        steps, the pinned ones and any step newer than the newest complete one stay."""
        steps = stored_steps(self.checkpoint_dir)
        complete = [s.step for s in steps if s.complete]
        if not complete:
            return
        kept = set(complete[-self.keep :])
        for step in steps:
            if step.step in kept or step.pinned or step.step > complete[-1]:
                continue
            with contextlib.suppress(OSError):
                (step.path / part_name(self.rank)).unlink()
            with contextlib.suppress(OSError):
                step.path.rmdir()  # the last rank to leave removes the directory

    def run(self, lines: object) -> None:
        """Persist after each line of `lines` (an iterable), and once more at its end."""
        self.persist_newest()
        for _ in lines:  # type: ignore[attr-defined]
            self.persist_newest()
        self.persist_newest()


class _Reused(Exception):
    """The trainer reused the slot while it was being copied."""


def _copy_range(src: BinaryIO, dst: BinaryIO, size: int) -> None:
    """Copy the first `size` bytes: ``sendfile`` where the kernel can, else by blocks."""
    src_fd, dst_fd = src.fileno(), dst.fileno()
    offset = 0
    try:
        while offset < size:
            sent = os.sendfile(dst_fd, src_fd, offset, size - offset)
            if sent == 0:
                raise OSError("the part ended before its size")
            offset += sent
    except OSError as exc:
        if offset or getattr(exc, "errno", None) not in (22, 38):  # EINVAL, ENOSYS
            raise
        src.seek(0)
        shutil.copyfileobj(src, dst, 16 << 20)
        dst.truncate(size)


def _unchanged(src: BinaryIO, part: Part) -> bool:
    src.seek(0)
    again = read_prefix(src.read(PREFIX.size), src)
    return again is not None and again.sequence == part.sequence and again.step == part.step


def _sync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def main(argv: list[str]) -> int:
    if not 4 <= len(argv) <= 6:
        print(__doc__, file=sys.stderr)
        return 2
    memory, checkpoints, rank, keep = argv[:4]
    control = argv[4] if len(argv) > 4 and argv[4] else None
    persister = Persister(
        Path(memory),
        Path(checkpoints),
        int(rank),
        int(keep),
        control_dir=Path(control) if control else None,
        node=argv[5] if len(argv) > 5 else "",
    )
    persister.run(sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
