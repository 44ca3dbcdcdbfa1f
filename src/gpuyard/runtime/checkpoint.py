"""Saving and loading a checkpoint in the job's checkpoint directory, with torch.

torch is imported inside the functions, so that ``import gpuyard.runtime`` stays cheap for a
script that saves its own way (it then calls `gpuyard.runtime.record_checkpoint`).

A checkpoint is written to a temporary file, synced to disk, and renamed over the old one: a
job killed while saving (its deadline passed) keeps its previous checkpoint whole, and the
next attempt never loads half a file.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from gpuyard.runtime.atomic import atomic_file
from gpuyard.runtime.process import Runtime, current

__all__ = ["DEFAULT_NAME", "load_checkpoint", "save_checkpoint"]

DEFAULT_NAME = "checkpoint.pt"


def save_checkpoint(
    state: Any,
    *,
    step: int | None = None,
    name: str = DEFAULT_NAME,
    runtime: Runtime | None = None,
) -> Path:
    """``torch.save(state)`` into ``checkpoint_dir/name`` atomically; record it in the control dir.

    `step` goes into ``checkpoint.json`` (the platform uses the time of the last checkpoint to
    choose whom to preempt: the least work lost). In a data-parallel job call it on one rank
    (every rank holds the same weights) and have the others wait for it (a barrier) before any
    rank exits. Returns the checkpoint's path.
    """
    import torch

    rt = runtime or current()
    directory = rt.env.checkpoint_dir
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / _plain_name(name)
    with rt.saving():
        with atomic_file(target) as file:
            torch.save(state, file)
        _sync_directory(directory)
    rt.record_checkpoint(target, step=step)
    return target


def load_checkpoint(
    name: str = DEFAULT_NAME,
    *,
    map_location: Any = None,
    weights_only: bool = True,
    runtime: Runtime | None = None,
) -> Any:
    """``torch.load`` of ``checkpoint_dir/name``, or None when there is none (a first attempt)
    or the attempt starts from scratch (``GPUYARD_RESUME=0``: a fault restart, see
    docs/fault-tolerance.md).

    `weights_only` is torch's safe default: tensors, numbers, strings and containers of them,
    which is what model and optimizer state dicts hold. `map_location` is passed to torch (for
    example ``"cpu"`` to load a GPU checkpoint on a machine without one).
    """
    import torch

    rt = runtime or current()
    path = rt.env.checkpoint_dir / _plain_name(name)
    if not rt.env.resume:
        return None
    try:
        file = path.open("rb")
    except FileNotFoundError:
        return None
    with file:
        return torch.load(file, map_location=map_location, weights_only=weights_only)


def _plain_name(name: str) -> str:
    """A file name inside the checkpoint dir: no separators, no way out of it."""
    if not name or name in {".", ".."} or "/" in name or os.sep in name:
        raise ValueError(f"checkpoint name must be a plain file name, got {name!r}")
    return name


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX: fsync the directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
