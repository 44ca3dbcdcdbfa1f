"""Copies of dataset versions on a node's fast storage (docs/datasets.md, "Data preparation").

::

    <root>/<node>/
    ├── v12-0a1b2c3d4e5f6a7b/        a verified copy (files 0444, directories 0555)
    ├── v12-0a1b2c3d4e5f6a7b.json    {"size": …, "last_used": …}
    ├── v12-0a1b2c3d4e5f6a7b.pins/   one empty file per job using it (its id)
    ├── v12-0a1b2c3d4e5f6a7b.lock    flock: one copier, and no eviction while it is pinned
    └── .tmp-v12-…-<random>/         a copy being made (renamed into place once verified)

A copy is made once per node and version: the first job takes the version's lock and copies,
a concurrent job of the same version waits on the lock and then finds the copy (it copies
nothing). Files are copied by the kernel (``copy_file_range``), a chunk at a time, each chunk
hashed as it landed in the copy (read back from the page cache), several files at once (the
hashing runs outside the GIL); every file is checked against the manifest;
a file that differs fails the copy naming it, and nothing of the copy is kept. A disk that
fills fails that node's copy (:class:`DataNoRoom`), its partial files removed.

Which copies go is :func:`gpuyard.models.dataprep.to_evict` (pins, retention, LRU under the
cap); eviction takes a copy's lock without waiting, so a copy being made or pinned meanwhile
is left alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpuyard.executors.base import DataMismatch, DataNoRoom, LaunchError
from gpuyard.models.dataprep import (
    DEFAULT_CACHE_MAX,
    DEFAULT_RETENTION,
    CachedCopy,
    DataSource,
    PreparedData,
    to_evict,
)
from gpuyard.models.dataset import ManifestFile
from gpuyard.quantities import format_bytes

__all__ = ["CHUNK", "NodeData"]

log = logging.getLogger(__name__)

CHUNK = 64 << 20
"""Bytes the kernel copies at a time, each then hashed back from the copy."""
HASH_BUFFER = 256 << 10
"""Bytes hashed at a time (small enough to stay in the CPU's cache)."""
PROGRESS_EVERY = 0.5
"""Seconds between progress calls while a copy is made."""
_TMP = ".tmp-"


class NodeData:
    """Every node's data cache on this machine, one directory per node under ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        retention: float = DEFAULT_RETENTION,
        max_bytes: int = DEFAULT_CACHE_MAX,
        now: Callable[[], float] = time.time,
        threads: int = 4,
        progress_every: float = PROGRESS_EVERY,
    ) -> None:
        """``progress_every``: seconds between two progress reports of a copy (its caller may
        raise from one to stop the copy: the job was stopped)."""
        self.progress_every = progress_every
        self.root = root
        self.retention = retention
        self.max_bytes = max_bytes
        self.now = now
        self.threads = max(1, threads)
        self._guard = threading.Lock()

    def node_dir(self, node: str) -> Path:
        return self.root / node

    def copy_path(self, node: str, key: str) -> Path:
        return self.node_dir(node) / key

    def holds(self, node: str, key: str) -> bool:
        return (self.node_dir(node) / f"{key}.json").is_file()

    # -- preparing ----------------------------------------------------------------------

    def prepare(
        self,
        node: str,
        source: DataSource,
        *,
        job_id: int,
        progress: Callable[[int, int], None],
    ) -> PreparedData:
        """The node's copy of ``source``, made (and verified) unless it is there, pinned
        for ``job_id``."""
        folder = self.node_dir(node)
        self._make_dir(folder)
        key = source.key
        with self._locked(folder, key, wait=True):
            final = folder / key
            copied = 0
            if not self.holds(node, key):
                self._clear_partial(folder, key)
                self._make_room(node, source, keep=key)
                copied = self._copy(folder, source, progress)
            self._pin(folder, key, job_id)
            self._write_meta(folder, key, source.manifest.size)
        return PreparedData(path=str(final), copied=copied)

    def _copy(self, folder: Path, source: DataSource, progress: Callable[[int, int], None]) -> int:
        """Copy and verify every file of ``source`` into a temporary directory, then rename
        it into place. The bytes copied."""
        tmp = folder / f"{_TMP}{source.key}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(mode=0o700)
        meter = _Meter(source.manifest.size, progress, self.progress_every)
        try:
            with ThreadPoolExecutor(self.threads, thread_name_prefix="data-copy") as pool:
                # Largest first: the last file to finish is a small one.
                files = sorted(source.manifest.files, key=lambda f: -f.size)
                copies = [pool.submit(self._copy_file, source, tmp, f, meter) for f in files]
                try:
                    for done in copies:
                        done.result()
                except BaseException:
                    meter.cancelled.set()  # the other files stop at their next chunk
                    raise
            _seal(tmp)
            tmp.rename(folder / source.key)
        except BaseException:
            meter.cancelled.set()
            _remove(tmp)
            raise
        meter.finish()
        return source.manifest.size

    def _copy_file(self, source: DataSource, tmp: Path, entry: ManifestFile, meter: _Meter) -> None:
        if meter.cancelled.is_set():
            return
        relative = Path(entry.path)
        if relative.is_absolute() or ".." in relative.parts:
            raise DataMismatch(f"dataset {source.ref}: its manifest names {entry.path!r}")
        target = tmp / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with (
                open(_open_below(source, relative), "rb", buffering=0) as src,
                open(target, "w+b", buffering=0) as dst,
            ):
                # One byte more than the manifest says tells a longer file, without copying
                # whatever a file that keeps growing would give.
                size, digest = _copy_and_hash(src.fileno(), dst.fileno(), meter, entry.size + 1)
        except FileNotFoundError:
            raise DataMismatch(
                f"dataset {source.ref} changed under its version: {entry.path} is missing"
            ) from None
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DataNoRoom(
                    f"no room for a copy of dataset {source.ref} "
                    f"({format_bytes(source.manifest.size)}) in {self.root}: "
                    f"{exc.strerror}"
                ) from None
            raise LaunchError(
                f"cannot copy {entry.path} of dataset {source.ref}: {exc.strerror or exc}"
            ) from None
        if meter.cancelled.is_set():
            return  # another file failed: this one's error would hide it
        if size != entry.size or digest != entry.sha256:
            raise DataMismatch(
                f"dataset {source.ref} changed under its version: {entry.path} has "
                f"{size} bytes and sha256 {digest[:16]}…, its manifest says "
                f"{entry.size} bytes and {entry.sha256[:16]}…"
            )

    def _make_room(self, node: str, source: DataSource, *, keep: str) -> None:
        """Evict what the cap needs for ``source``, then refuse if the disk has no room."""
        self._evict(node, incoming=source.manifest.size, keep=keep)
        free = shutil.disk_usage(self.node_dir(node)).free
        if free < source.manifest.size:
            raise DataNoRoom(
                f"no room for a copy of dataset {source.ref} on {node}: it needs "
                f"{format_bytes(source.manifest.size)}, {format_bytes(free)} is free in "
                f"{self.root}"
            )

    # -- pins, last use, eviction ---------------------------------------------------------

    def jobs(self) -> set[int]:
        """The jobs that pin a copy on some node."""
        found: set[int] = set()
        for pins in self.root.glob("*/*.pins"):
            found.update(int(p.name) for p in pins.iterdir() if p.name.isdigit())
        return found

    def release(self, job_id: int) -> None:
        """Drop ``job_id``'s pins; each copy it pinned was last used now."""
        for pin in self.root.glob(f"*/*.pins/{job_id}"):
            folder, key = pin.parent.parent, pin.parent.name.removesuffix(".pins")
            with self._locked(folder, key, wait=True):
                pin.unlink(missing_ok=True)
                meta = self._read_meta(folder, key)
                if meta is not None:
                    self._write_meta(folder, key, int(meta["size"]))

    def sweep(self) -> list[str]:
        """Evict stale and over-the-cap copies on every node; what went, as node/key."""
        gone: list[str] = []
        if not self.root.is_dir():
            return gone
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            gone += [f"{folder.name}/{key}" for key in self._evict(folder.name, incoming=0)]
        return gone

    def copies(self, node: str) -> list[CachedCopy]:
        folder = self.node_dir(node)
        found = []
        for meta_file in sorted(folder.glob("*.json")):
            key = meta_file.name.removesuffix(".json")
            meta = self._read_meta(folder, key)
            if meta is None:
                continue
            pins = folder / f"{key}.pins"
            pinned = pins.is_dir() and any(pins.iterdir())
            found.append(CachedCopy(key, int(meta["size"]), float(meta["last_used"]), pinned))
        return found

    def _evict(self, node: str, *, incoming: int, keep: str = "") -> list[str]:
        folder = self.node_dir(node)
        keys = to_evict(
            self.copies(node),
            now=self.now(),
            retention=self.retention,
            max_bytes=self.max_bytes,
            incoming=incoming,
        )
        gone = []
        for key in keys:
            if key == keep:
                continue
            with self._locked(folder, key, wait=False) as held:
                if not held:
                    continue  # being copied or pinned right now: left for a later sweep
                pins = folder / f"{key}.pins"
                if pins.is_dir() and any(pins.iterdir()):
                    continue
                (folder / f"{key}.json").unlink(missing_ok=True)
                _remove(folder / key)
                shutil.rmtree(pins, ignore_errors=True)
                gone.append(key)
                log.info("data cache: evicted %s on %s", key, node)
        return gone

    def _pin(self, folder: Path, key: str, job_id: int) -> None:
        pins = folder / f"{key}.pins"
        pins.mkdir(exist_ok=True)
        (pins / str(job_id)).touch()

    def _write_meta(self, folder: Path, key: str, size: int) -> None:
        meta = folder / f"{key}.json"
        tmp = folder / f"{key}.json.{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps({"size": size, "last_used": self.now()}))
        tmp.replace(meta)

    @staticmethod
    def _read_meta(folder: Path, key: str) -> dict[str, float] | None:
        try:
            meta = json.loads((folder / f"{key}.json").read_text())
            return {"size": float(meta["size"]), "last_used": float(meta["last_used"])}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _clear_partial(self, folder: Path, key: str) -> None:
        """Copies of ``key`` cut short (a crash): the lock is ours, so none is being made."""
        for partial in folder.glob(f"{_TMP}{key}-*"):
            _remove(partial)
        _remove(folder / key)  # a copy whose meta was never written

    def _make_dir(self, folder: Path) -> None:
        with self._guard:
            self.root.mkdir(parents=True, exist_ok=True)
            folder.mkdir(exist_ok=True)
            # The pool's alone: a job reaches its copy only through the mount its launch
            # makes (docs/datasets.md, "Who reaches a dataset's files").
            for path in (self.root, folder):
                os.chmod(path, 0o700)

    @contextlib.contextmanager
    def _locked(self, folder: Path, key: str, *, wait: bool) -> Iterator[bool]:
        fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)


class _Meter:
    """Bytes copied so far, reported at most every :data:`PROGRESS_EVERY` seconds."""

    def __init__(self, total: int, progress: Callable[[int, int], None], every: float) -> None:
        self.total = total
        self.done = 0
        self.progress = progress
        self.every = every
        self.cancelled = threading.Event()
        self._next = time.monotonic() + every
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            now = time.monotonic()
            if now < self._next:
                return
            self._next = now + self.every
            done = self.done
        self.progress(done, self.total)

    def finish(self) -> None:
        self.progress(self.total, self.total)


def _open_below(source: DataSource, relative: Path) -> int:
    """The file ``relative`` below the version's directory, opened (as the pool, which may be
    root) without following a link at any step and without blocking: the dataset's owner may
    have changed the tree since it was hashed, and a link must not let the pool read, on their
    behalf, what their account cannot. Raises DataMismatch for a link, or anything but a
    regular file."""
    step = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(source.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in relative.parts[:-1]:
            inner = os.open(part, step, dir_fd=fd)
            os.close(fd)
            fd = inner
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        found = os.open(relative.name, flags, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise DataMismatch(
                f"dataset {source.ref} changed under its version: {relative} is reached "
                "through a link, or is one"
            ) from None
        raise
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(found).st_mode):
        os.close(found)
        raise DataMismatch(
            f"dataset {source.ref} changed under its version: {relative} is not a regular file"
        )
    return found


def _copy_and_hash(src: int, dst: int, meter: _Meter, limit: int) -> tuple[int, str]:
    """Copy ``src`` to ``dst`` a chunk at a time and hash each chunk as it landed in
    ``dst`` (read back while it is in the page cache): the digest is of what the node holds,
    not of what was read. The kernel copies (``copy_file_range``: no trip through this
    process); where it cannot, the bytes are read, hashed and written once. The bytes copied
    and their sha256."""
    digest = hashlib.sha256()
    buffer = bytearray(HASH_BUFFER)
    view = memoryview(buffer)
    size = 0
    while not meter.cancelled.is_set() and size < limit:
        try:
            n = os.copy_file_range(src, dst, min(CHUNK, limit - size))
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            return _read_hash_write(src, dst, meter, digest, size, limit)
        if not n:
            break
        left, at = n, size
        while left:
            got = os.preadv(dst, [view[: min(left, HASH_BUFFER)]], at)
            if not got:
                raise OSError(errno.EIO, "the copy is shorter than what was written")
            digest.update(view[:got])
            left -= got
            at += got
        size += n
        meter.add(n)
    return size, digest.hexdigest()


def _read_hash_write(
    src: int, dst: int, meter: _Meter, digest: hashlib._Hash, size: int, limit: int
) -> tuple[int, str]:
    """The copy through this process: one read, hashed and written."""
    buffer = bytearray(HASH_BUFFER)
    view = memoryview(buffer)
    while size < limit and (n := os.readv(src, [view[: min(HASH_BUFFER, limit - size)]])):
        chunk = view[:n]
        digest.update(chunk)
        _write_all(dst, chunk)
        size += n
        meter.add(n)
        if meter.cancelled.is_set():
            break
    return size, digest.hexdigest()


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _seal(tree: Path) -> None:
    """Files 0444 and directories 0555: the copy is read-only for everyone, its owner too."""
    for path, dirs, files in os.walk(tree):
        for name in files:
            os.chmod(os.path.join(path, name), 0o444)
        for name in dirs:
            os.chmod(os.path.join(path, name), 0o555)  # noqa: S103 - read by jobs' accounts
    os.chmod(tree, 0o555)  # noqa: S103 - read by jobs' accounts


def _remove(tree: Path) -> None:
    """Remove a (sealed) copy: its directories made writable first."""
    if not tree.exists():
        return
    for path, dirs, _files in os.walk(tree):
        os.chmod(path, 0o700)
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(path, name), 0o700)
    shutil.rmtree(tree, ignore_errors=True)
