"""Apply an image layer (a tar, optionally gzip-compressed) to a root filesystem, safely.

A layer is untrusted data. Every path is resolved inside the root, one component at a time,
through directory file descriptors opened with ``O_NOFOLLOW``: a symlink met on the way
(planted by this layer or an earlier one) is read and resolved *as if the root were /*, so an
absolute symlink such as ``/lib -> /usr/lib`` works as in the image and ``/etc -> /`` or
``x -> ../../..`` lands on the root, never above it. The last component of an entry is never
followed: whatever is there (a symlink included) is replaced. What a hostile layer gets
(docs/images.md#what-a-hostile-layer-gets):

- a ``..`` component in an entry, a hardlink target or a whiteout: the layer is refused
  (``UnsafeLayer``); a leading ``/`` is dropped (the path is inside the root anyway);
- a hardlink resolves its target inside the root and links that file, never a host file;
- device nodes and FIFOs are skipped (the runtime supplies ``/dev``);
- setuid and setgid bits are stripped; owners are kept when unpacking as root;
- OCI whiteouts (``.wh.NAME``, ``.wh..wh..opq``) delete lower layers' entries inside the root;
- regular files may add up to ``max_bytes`` at most (``ImageTooLarge`` beyond), and a layer
  may hold ``MAX_ENTRIES`` entries at most.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gpuyard.images.errors import ImageError, ImageTooLarge, UnsafeLayer, UnsupportedLayer

__all__ = ["LayerStats", "entry_parts", "unpack_layer"]

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
MAX_ENTRIES = 1_000_000
"""Entries per layer: a large CUDA image's biggest layer has about a tenth of that; more is an
inode bomb, which the byte cap does not stop (empty files and directories weigh nothing)."""
MAX_SYMLINK_HOPS = 40
"""As the kernel's own limit: more is a loop."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_KEPT_MODE = 0o1777
"""Permission bits kept: everything but setuid and setgid."""


@dataclass
class LayerStats:
    """What one layer did to the root."""

    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)


def entry_parts(name: str) -> list[str]:
    """The components of a tar entry's name inside the root; ``..`` anywhere is refused."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeLayer(f"layer entry {name!r} climbs out of the image with '..'; refused")
    return parts


class _Root:
    """Directory lookups confined to one root directory."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, _DIR_FLAGS)
        self.as_root = os.geteuid() == 0

    def close(self) -> None:
        os.close(self.fd)

    def open_dir(self, parts: list[str], *, create: bool) -> int | None:
        """A descriptor of the directory ``parts`` names, symlinks resolved inside the root;
        missing directories are made (``create``) or the answer is None."""
        stack = [os.dup(self.fd)]
        pending, hops = list(parts), 0
        try:
            while pending:
                part = pending.pop(0)
                if part in ("", "."):
                    continue
                if part == "..":
                    if len(stack) > 1:
                        os.close(stack.pop())
                    continue
                found = self._step(stack[-1], part, create)
                if isinstance(found, int):
                    stack.append(found)
                    continue
                if found is None:
                    return None
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise UnsafeLayer(f"too many symbolic links resolving {'/'.join(parts)!r}")
                if found.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                pending = found.split("/") + pending
            return stack.pop()
        finally:
            for fd in stack:
                os.close(fd)

    def _step(self, dir_fd: int, part: str, create: bool) -> int | str | None:
        """Open ``part`` as a directory: its fd, a symlink's target to resolve, or None."""
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create:
                return None
        except OSError:
            mode = os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                return os.readlink(part, dir_fd=dir_fd)
            if not create:
                return None
            os.unlink(part, dir_fd=dir_fd)  # a file where the layer wants a directory
        os.mkdir(part, 0o755, dir_fd=dir_fd)
        return os.open(part, _DIR_FLAGS, dir_fd=dir_fd)


def _remove(dir_fd: int, name: str) -> None:
    """Delete ``name`` in the directory, without following it if it is a symlink."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


class _Layer:
    """One layer's entries applied to a root, in tar order."""

    def __init__(self, root: _Root, max_bytes: int | None, max_entries: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.stats = LayerStats()
        self.written: set[tuple[str, ...]] = set()
        self.dir_modes: dict[tuple[str, ...], int] = {}

    def apply(self, tar: tarfile.TarFile) -> None:
        for count, member in enumerate(tar, start=1):
            if count > self.max_entries:
                raise UnsafeLayer(f"a layer has more than {self.max_entries} entries; refused")
            parts = entry_parts(member.name)
            if not parts:
                continue
            name = parts[-1]
            if name == OPAQUE_MARKER:
                self._opaque(parts[:-1])
            elif name.startswith(WHITEOUT_PREFIX):
                self._whiteout(parts[:-1], name[len(WHITEOUT_PREFIX) :])
            elif member.isreg() or member.isdir() or member.issym() or member.islnk():
                self._entry(tar, member, parts)
            else:
                self.stats.skipped.append(member.name)  # devices, FIFOs: the runtime's /dev
        self._set_dir_modes()

    def _entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo, parts: list[str]) -> None:
        parent = self.root.open_dir(parts[:-1], create=True)
        assert parent is not None  # create=True always answers a directory
        name = parts[-1]
        try:
            if member.isdir():
                self._directory(parent, name, member, parts)
            else:
                _remove(parent, name)
                if member.isreg():
                    self._file(tar, parent, name, member)
                elif member.issym():
                    os.symlink(member.linkname, name, dir_fd=parent)
                    self._chown(parent, name, member)
                else:
                    self._hardlink(parent, name, member)
            self.written.add(tuple(parts))
        finally:
            os.close(parent)

    def _directory(self, parent: int, name: str, member: tarfile.TarInfo, parts: list[str]) -> None:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                _remove(parent, name)
                os.mkdir(name, 0o700, dir_fd=parent)
        self._chown(parent, name, member)
        # Kept writable for the rest of the layer; the image's mode is set at its end.
        os.chmod(name, (member.mode & _KEPT_MODE) | 0o700, dir_fd=parent, follow_symlinks=False)
        self.dir_modes[tuple(parts)] = member.mode & _KEPT_MODE

    def _file(self, tar: tarfile.TarFile, parent: int, name: str, member: tarfile.TarInfo) -> None:
        source = tar.extractfile(member)
        assert source is not None  # a regular member always has data
        fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=parent)
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(_CHUNK):
                self._count(len(chunk))
                out.write(chunk)
            if self.root.as_root:
                os.fchown(fd, member.uid, member.gid)
            os.fchmod(fd, member.mode & _KEPT_MODE)
            os.utime(fd, (member.mtime, member.mtime))
        self.stats.files += 1

    def _count(self, size: int) -> None:
        self.stats.bytes += size
        if self.max_bytes is not None and self.stats.bytes > self.max_bytes:
            raise ImageTooLarge(
                f"a layer unpacks to more than the {self.max_bytes} bytes left in the image "
                "cache; raise the cache's size cap or free disk"
            )

    def _hardlink(self, parent: int, name: str, member: tarfile.TarInfo) -> None:
        target = entry_parts(member.linkname)
        source = self.root.open_dir(target[:-1], create=False) if target else None
        if source is None:
            raise UnsafeLayer(
                f"hardlink {member.name!r} points at {member.linkname!r}, not in the image"
            )
        try:
            mode = os.stat(target[-1], dir_fd=source, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                raise UnsafeLayer(f"hardlink {member.name!r} points at a directory; refused")
            os.link(target[-1], name, src_dir_fd=source, dst_dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            raise UnsafeLayer(
                f"hardlink {member.name!r} points at {member.linkname!r}, not in the image"
            ) from None
        finally:
            os.close(source)

    def _chown(self, parent: int, name: str, member: tarfile.TarInfo) -> None:
        if self.root.as_root:
            os.chown(name, member.uid, member.gid, dir_fd=parent, follow_symlinks=False)

    def _whiteout(self, dir_parts: list[str], target: str) -> None:
        if target in ("", ".", ".."):
            raise UnsafeLayer(f"whiteout of {target!r} in {'/'.join(dir_parts)!r}; refused")
        if (*dir_parts, target) in self.written:
            return  # a whiteout hides lower layers only (OCI image spec)
        with self._existing_dir(dir_parts) as parent:
            if parent is not None:
                _remove(parent, target)

    def _opaque(self, dir_parts: list[str]) -> None:
        with self._existing_dir(dir_parts) as parent:
            if parent is None:
                return
            for entry in os.listdir(parent):
                if (*dir_parts, entry) not in self.written:
                    _remove(parent, entry)

    @contextlib.contextmanager
    def _existing_dir(self, parts: list[str]) -> Iterator[int | None]:
        fd = self.root.open_dir(parts, create=False)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def _set_dir_modes(self) -> None:
        for parts, mode in sorted(self.dir_modes.items(), key=lambda item: -len(item[0])):
            with self._existing_dir(list(parts[:-1])) as parent:
                if parent is not None:
                    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                        os.chmod(parts[-1], mode, dir_fd=parent, follow_symlinks=False)


@contextlib.contextmanager
def _decompressed(layer: Path) -> Iterator[BinaryIO]:
    with layer.open("rb") as raw:
        magic = raw.read(4)
        raw.seek(0)
        if magic.startswith(_ZSTD_MAGIC):
            raise UnsupportedLayer(
                f"layer {layer.name} is zstd-compressed, which this node cannot read; "
                "push the image with gzip layers"
            )
        if magic.startswith(_GZIP_MAGIC):
            with gzip.GzipFile(fileobj=raw) as unzipped:
                yield unzipped  # type: ignore[misc]
        else:
            yield raw


def unpack_layer(
    layer: Path, root: Path, *, max_bytes: int | None = None, max_entries: int = MAX_ENTRIES
) -> LayerStats:
    """Apply the layer file ``layer`` to the directory ``root`` (module docstring's rules)."""
    confined = _Root(root)
    try:
        with _decompressed(layer) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            applied = _Layer(confined, max_bytes, max_entries)
            applied.apply(tar)
            return applied.stats
    except (tarfile.TarError, EOFError, gzip.BadGzipFile) as error:
        raise UnsupportedLayer(
            f"layer {layer.name} is not a readable tar archive: {error}"
        ) from None
    except (OSError, OverflowError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) else str(error)
        raise ImageError(f"layer {layer.name} could not be applied ({reason})") from None
    finally:
        confined.close()
