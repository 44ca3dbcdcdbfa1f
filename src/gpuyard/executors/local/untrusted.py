"""Files in directories a job can write: opened without following links, never blocking, and
read only up to a cap.

A job's own directories (its control directory, its workspace) are the job's to write, and a
job that runs as the pool's own user (``run_as: pool``) can write anything under the pool's
home, so any of it may have been replaced by a job: a file by a symbolic link (to
``/dev/zero``, to a FIFO, to a file the pool must not overwrite), by a directory, by something
huge. Every path below the home is walked
one directory at a time with ``O_NOFOLLOW``; a file is opened non-blocking and read only if it
is a regular file, at most ``cap + 1`` bytes; a file is written under a fresh temporary name
(``O_EXCL``, so never through a link someone planted) and renamed into place.

The supervisor uses it too, so it imports builtin modules only.
"""

from __future__ import annotations

import errno
import os
import stat
import time

__all__ = ["CAP", "Unreadable", "make_dir", "open_dir", "read_file", "write_file"]

CAP = 64 * 1024
"""Bytes a file of the worker directory may have (control files, records)."""

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class Unreadable(Exception):
    """A file is there but is not something the pool reads; the message says why."""


def open_dir(root: str, path: str) -> int:
    """An fd of directory ``path``, which lies below ``root``, reached without following a
    link below ``root``. Raises FileNotFoundError when it is absent, Unreadable when a part of
    it is not a directory."""
    relative = os.path.relpath(path, root)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        raise Unreadable(f"{path} is not below {root}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [] if relative == os.curdir else relative.split(os.sep):
            try:
                child = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Unreadable(f"{part} is not a directory") from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_dir(parent_fd: int, name: str, mode: int, owner: tuple[int, int] | None = None) -> int:
    """An fd of directory ``name`` in ``parent_fd``, made if it is missing and never reached
    through a link, set to exactly ``mode`` and, when given, ``owner`` (uid, gid). Raises
    Unreadable when ``name`` is there but is not a directory."""
    try:  # noqa: SIM105 - contextlib would cost the supervisor an import
        os.mkdir(name, mode, dir_fd=parent_fd)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, _DIR, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unreadable(f"{name} is not a directory") from None
        raise
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(dir_fd: int, name: str, cap: int = CAP) -> bytes | None:
    """The content of ``name`` in directory ``dir_fd``; None when it is absent. Raises
    Unreadable for a link, anything but a regular file, or more than ``cap`` bytes."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Unreadable("a symbolic link, not a file") from None
        raise Unreadable(exc.strerror or "cannot be opened") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > cap:
            raise Unreadable(f"larger than {cap // 1024} KiB")
        chunks: list[bytes] = []
        size = 0
        while size <= cap:
            chunk = os.read(fd, cap + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > cap:  # it grew after the fstat
            raise Unreadable(f"larger than {cap // 1024} KiB")
        return b"".join(chunks)
    except OSError as exc:
        raise Unreadable(exc.strerror or "cannot be read") from None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def write_file(
    dir_fd: int, name: str, data: bytes, *, mode: int = 0o644, sync: bool = False
) -> None:
    """Write ``name`` in ``dir_fd`` whole: a new temporary file, then a rename over ``name``
    (which replaces a link there, never its target)."""
    for attempt in range(10):
        tmp = f".{name}.{os.getpid()}.{time.monotonic_ns()}.{attempt}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                mode,
                dir_fd=dir_fd,
            )
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(errno.EEXIST, f"no free temporary name for {name}")
    try:
        try:
            os.fchmod(fd, mode)  # exactly: the umask of whoever runs this does not apply
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:  # noqa: SIM105 - contextlib would cost the supervisor an import
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
