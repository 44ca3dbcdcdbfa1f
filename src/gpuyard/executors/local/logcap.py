"""A worker's log with a size cap, written by its supervisor (docs/security.md#logs-and-disk-space).

The command's stdout and stderr are a pipe; the supervisor drains it (:meth:`CappedLog.drain`,
in a thread of its own) into the log file, so the job never writes the file itself and cannot
make it grow without bound. When the next chunk would take the file past the cap, the **oldest
part is dropped**: the newest half of the cap is kept (from the first line that starts in it),
behind one marker line that says how many bytes of output were dropped so far. The file is
rewritten under a temporary name and renamed into place, so a reader always sees a whole
file, and never more than the cap is used once the rename is done.

Offsets stay those of the whole output: a log's byte *k* is at offset ``base + k``, where
``base`` (the bytes dropped before the file's first byte, less the marker) is kept in
``log.json`` in the supervisor's directory, which no job can write, together with the inode it
belongs to (and the previous file's, for a reader that opened the file just before the
rename). :func:`read_meta` reads it back; a reader asking for an offset that was dropped starts
at the oldest byte kept (the marker).

Writes that fail because the disk is full (ENOSPC, EDQUOT) lose that output rather than block
the job: the next write that succeeds starts with a line saying how much was lost.

It runs in the supervisor, so it imports builtin modules only.
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False  # typing itself costs an import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["CHUNK", "META", "MIN_CAP", "CappedLog", "marker", "read_meta"]

META = "log.json"
"""The log's offsets, in the supervisor's directory."""
CHUNK = 64 * 1024
"""Bytes read from the pipe at a time."""
MIN_CAP = 1 << 20
"""The smallest cap: a chunk and a marker line fit many times in half of it."""
LINE_SEARCH = 64 * 1024
"""How far into the kept part to look for the start of a line."""
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def marker(dropped: int, cap: int) -> bytes:
    return (
        f"gpuyard: {dropped} bytes of the oldest output were dropped here (a worker's log is "
        f"capped at {cap} bytes: GPUYARD_LOG_MAX)\n"
    ).encode()


def _lost(lost: int) -> bytes:
    return f"gpuyard: {lost} bytes of output were lost here: the disk was full\n".encode()


def read_meta(meta: object, inode: int) -> int:
    """The offset of the first byte of the log file whose inode is ``inode``, from ``log.json``
    as parsed (None: no drop yet, 0). -1 when the record names neither this file nor the one
    before it (a drop renamed the file in between: read again)."""
    if meta is None:
        return 0
    for entry in (meta, meta.get("previous") or {}) if isinstance(meta, dict) else ():
        if isinstance(entry, dict) and entry.get("inode") == inode:
            base = entry.get("base")
            if isinstance(base, int) and not isinstance(base, bool) and base >= 0:
                return base
    return -1


class CappedLog:
    """The log file of one worker: ``path`` (its directory root's, which the job cannot
    change), at most ``cap`` bytes (0: no cap); ``write_meta`` stores ``log.json``."""

    def __init__(
        self,
        path: str,
        cap: int,
        write_meta: Callable[[dict[str, Any]], None],
        *,
        group: int | None = None,
    ) -> None:
        self.dir_fd = os.open(
            os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        )
        self.name = os.path.basename(path)
        self.cap = cap
        self.write_meta = write_meta
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = os.open(self.name, flags, 0o644, dir_fd=self.dir_fd)
        if group is not None:
            # Its job reads it, nobody else; it writes only through its stdout and stderr.
            os.fchown(self.fd, 0, group)
            os.fchmod(self.fd, 0o640)
        self.size = os.fstat(self.fd).st_size
        self.base = 0
        self.dropped = 0
        self.marker_size = 0
        self.lost = 0
        self.consumed = 0
        """Bytes taken from the pipe so far."""
        self.busy = False
        """Between taking bytes from the pipe and writing them."""

    # -- writing -----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Append ``data``, dropping the oldest part first if it would pass the cap; output
        that the disk has no room for is counted as lost, never waited on."""
        if self.lost:
            note = _lost(self.lost)
            if not self._append(note, count_lost=False):
                self.lost += len(data)
                return
            self.lost = 0
        if self.cap and self.size + len(data) > self.cap:
            self._drop()
        self._append(data)

    def _append(self, data: bytes, *, count_lost: bool = True) -> bool:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.fd, view)
            except OSError as exc:
                if exc.errno not in FULL:
                    raise
                if count_lost:
                    self.lost += len(view)
                return False
            self.size += written
            view = view[written:]
        return True

    def drain(self, read_fd: int) -> None:
        """Copy the pipe into the log until every writer has closed it."""
        while True:
            try:
                data = os.read(read_fd, CHUNK)
            except OSError:
                break
            if not data:
                break
            self.busy = True
            try:
                self.write(data)
            except OSError:  # whatever went wrong, the job must not block on its output
                self.lost += len(data)
            finally:
                self.consumed += len(data)
                self.busy = False
        os.close(read_fd)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.dir_fd)

    # -- dropping the oldest part ----------------------------------------------------------------

    def _drop(self) -> None:
        start = self._keep_from(max(0, self.size - self.cap // 2))
        dropped = self.dropped + start - self.marker_size
        note = marker(dropped, self.cap)
        try:
            fd = self._rewritten(note, start)
        except OSError as exc:
            if exc.errno not in FULL:
                raise
            self._truncate()  # no room for a copy: keep nothing rather than stop
            return
        new_base = self.base + start - len(note)
        try:
            self.write_meta(
                {
                    "inode": os.fstat(fd).st_ino,
                    "base": new_base,
                    "dropped": dropped,
                    "previous": {"inode": os.fstat(self.fd).st_ino, "base": self.base},
                }
            )
        except OSError:
            os.close(fd)
            os.unlink(self._tmp, dir_fd=self.dir_fd)
            self._truncate()
            return
        os.rename(self._tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        os.close(self.fd)
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.base = new_base
        self.dropped = dropped
        self.marker_size = len(note)

    @property
    def _tmp(self) -> str:
        return f".{self.name}.drop"

    def _keep_from(self, start: int) -> int:
        """``start``, moved to just after the next newline if one comes soon (so the kept part
        begins with a whole line)."""
        reader = os.open(self.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.dir_fd)
        try:
            head = os.pread(reader, LINE_SEARCH, start)
        finally:
            os.close(reader)
        cut = head.find(b"\n")
        return start + cut + 1 if cut >= 0 else start

    def _rewritten(self, note: bytes, start: int) -> int:
        """A new file (the temporary name): ``note``, then the old file from ``start``."""
        try:  # noqa: SIM105 - contextlib would cost an import in every supervisor
            os.unlink(self._tmp, dir_fd=self.dir_fd)
        except FileNotFoundError:
            pass
        info = os.fstat(self.fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND | os.O_CLOEXEC
        fd = os.open(self._tmp, flags, 0o600, dir_fd=self.dir_fd)
        reader = os.open(self.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.dir_fd)
        try:
            if os.geteuid() == 0:
                os.fchown(fd, info.st_uid, info.st_gid)
            os.fchmod(fd, info.st_mode & 0o777)
            _write_all(fd, note)
            offset = start
            while offset < self.size:
                block = os.pread(reader, min(1 << 20, self.size - offset), offset)
                if not block:
                    break
                _write_all(fd, block)
                offset += len(block)
        except BaseException:
            os.close(fd)
            os.unlink(self._tmp, dir_fd=self.dir_fd)
            raise
        finally:
            os.close(reader)
        return fd

    def _truncate(self) -> None:
        """The file emptied in place, starting with the marker: what a full disk leaves."""
        self.dropped += self.size - self.marker_size
        note = marker(self.dropped, self.cap)
        os.ftruncate(self.fd, 0)
        self.base += self.size - len(note)  # the next byte keeps its offset
        self.size = 0
        self.marker_size = 0
        try:  # noqa: SIM105 - contextlib would cost an import
            self.write_meta({"inode": os.fstat(self.fd).st_ino, "base": self.base})
        except OSError:
            pass  # offsets may be off after this; the log itself stays capped
        if self._append(note, count_lost=False):
            self.marker_size = len(note)
        else:  # not even the marker: its offsets are the next bytes'
            self.base += len(note)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
