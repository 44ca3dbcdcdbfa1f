"""Files only their owner may read: tokens, written whole under a temporary name, mode 0600
from the start, then renamed into place, so that a crash leaves the old file and no reader
ever sees a half-written or world-readable one; and logs (``pool.log``), opened to append,
0600 from creation and made 0600 if an older version left them wider."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["open_private_log", "write_private"]


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def open_private_log(path: Path) -> int:
    """A descriptor of ``path`` opened to append, only its owner may read it (the server's
    log says which jobs and users did what). A link there is not followed: the pool's home
    is its own, and a link in it is not what it wrote."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd
