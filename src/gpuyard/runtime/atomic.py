"""A file that appears whole or not at all: written beside its target under a temporary name,
flushed to the disk, then renamed over it (removed if anything fails on the way). The standard
library only: the persister imports it without torch."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_file"]


@contextlib.contextmanager
def atomic_file(target: Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``target`` for writing; when the block ends, fsync it and
    rename it over ``target``. On an error (raised again) the temporary file is removed and
    ``target`` is untouched. The directory is not synced: a caller that needs the rename
    itself durable syncs it."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
