"""A pseudo-terminal for an interactive worker (``gpuyard exec JOB shell``): its master side.

The executor keeps the master, hands the slave to the worker's supervisor as its stdin, and the
supervisor makes it the command's controlling terminal (:mod:`supervisor`). Whoever relays the
shell reads and writes the master; a resize is an ioctl on it, which the kernel turns into a
SIGWINCH for the shell's foreground process group.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import termios

__all__ = ["MAX_SIZE", "PtyTerminal", "open_terminal"]

MAX_SIZE = 1000
"""Rows or columns a terminal may have (a window is far smaller; the ioctl takes 16 bits)."""


def _winsize(rows: int, cols: int) -> bytes:
    if not (1 <= rows <= MAX_SIZE and 1 <= cols <= MAX_SIZE):
        raise ValueError(f"a terminal has 1 to {MAX_SIZE} rows and columns, not {rows}x{cols}")
    return struct.pack("HHHH", rows, cols, 0, 0)


class PtyTerminal:
    """The master side of a pseudo-terminal (non-blocking, close-on-exec)."""

    def __init__(self, master: int) -> None:
        self._fd = master

    def fileno(self) -> int:
        return self._fd

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self._fd, termios.TIOCSWINSZ, _winsize(rows, cols))

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)


def open_terminal(rows: int, cols: int) -> tuple[PtyTerminal, int]:
    """A new pseudo-terminal of ``rows`` x ``cols``: its master, and its slave's descriptor
    (the caller hands it on and closes its own copy)."""
    size = _winsize(rows, cols)
    master, slave = os.openpty()  # both close-on-exec (not inheritable)
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
        os.set_blocking(master, False)
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    return PtyTerminal(master), slave
