"""The files of the dataset catalogue (docs/datasets.md): where a path on shared storage may
come from, whether the caller's OS account may read it, its manifest, and an uploaded
archive unpacked safely.

- **A path** must lie below one of the admin's ``GPUYARD_DATASET_ROOTS``. It is opened one
  component at a time below the root with ``O_NOFOLLOW``: a link on the way is refused, so a
  path never leaves its root through a link (the root itself may be a link the admin made).
- **Reading as the account.** Where jobs run as their owners' accounts, each directory from
  ``/`` down needs search (``x``) for the account, and the dataset's own directory read and
  search; while hashing, each directory below needs ``r`` and ``x`` and each file ``r``: a
  version made from a path holds nothing its owner's account could not read itself (nor its
  sha256). Where the pool runs jobs as its own user, the server's own access is what counts.
- **The manifest** lists regular files only, each opened relative to its directory's file
  descriptor without following links; links and other entries are neither followed nor
  listed. At most :data:`MAX_FILES` files (shard a larger dataset into archives).
- **An upload** is a tar (gzip or not) unpacked with the image layers' safe rules
  (:mod:`gpuyard.images.unpack`: no absolute paths, no ``..``, links resolved inside, devices
  and FIFOs skipped, setuid dropped, a byte cap); then a link that points out of the tree is
  refused, owners become the pool's and modes ``0755``/``0644`` (``0755`` where executable),
  so every account the catalogue lets mount it can read it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from gpuyard.errors import InvalidSpec, PermissionDenied, TooLarge
from gpuyard.images.errors import ImageError, ImageTooLarge
from gpuyard.images.unpack import unpack_layer
from gpuyard.launch.program import Account
from gpuyard.models.dataset import Manifest, ManifestFile

__all__ = [
    "MAX_FILES",
    "AccountOf",
    "check_readable",
    "hash_tree",
    "resolve_under_roots",
    "unpack_upload",
    "write_chunk",
]

MAX_FILES = 200_000
"""Files in one version: its manifest is kept in the database."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)
_CHUNK = 1 << 20
_R, _X = 0o4, 0o1

AccountOf = Callable[[str], Account | None]
"""A user's OS account (where jobs run as their owners), or None: check as the server."""

NO_ROOTS = (
    "this pool makes no dataset from a path: an admin lists the directories datasets may "
    "come from in GPUYARD_DATASET_ROOTS (colon-separated, e.g. /data:/scratch/shared); or "
    "upload it: gpuyard datasets upload NAME DIR"
)


def resolve_under_roots(path: str, roots: Sequence[str]) -> str:
    """The directory ``path`` names, below one of ``roots``, reached without following a
    link; its canonical path. :class:`InvalidSpec` saying why not."""
    if not roots:
        raise InvalidSpec(NO_ROOTS)
    if not path.startswith("/") or "\x00" in path:
        raise InvalidSpec(f"path {path!r}: give an absolute path below a dataset root")
    parts = [p for p in path.split("/") if p]
    if ".." in parts or "." in parts:
        raise InvalidSpec(f"path {path!r}: '.' and '..' are not allowed; write the path plainly")
    for root in roots:
        below = _below(parts, root)
        if below is not None:
            return _open_below(os.path.realpath(root), below, path)
    raise InvalidSpec(
        f"path {path!r} is not below a dataset root of this pool ({':'.join(roots)}); "
        "ask an admin to add its directory to GPUYARD_DATASET_ROOTS, or upload it"
    )


def _below(parts: list[str], root: str) -> list[str] | None:
    """``parts`` relative to ``root`` (as given or as its links resolve), or None."""
    for form in dict.fromkeys([root, os.path.realpath(root)]):
        root_parts = [p for p in posixpath.normpath(form).split("/") if p]
        if parts[: len(root_parts)] == root_parts:
            return parts[len(root_parts) :]
    return None


def _open_below(root: str, below: list[str], given: str) -> str:
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise InvalidSpec(f"the dataset root {root} cannot be opened ({error.strerror})") from None
    try:
        for part in below:
            try:
                next_fd = os.open(part, _DIR, dir_fd=fd)
            except OSError as error:
                raise InvalidSpec(_open_refusal(given, part, error)) from None
            os.close(fd)
            fd = next_fd
    finally:
        os.close(fd)
    return posixpath.join(root, *below)


def _open_refusal(given: str, part: str, error: OSError) -> str:
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        return (
            f"path {given!r}: {part!r} is a link or not a directory; links are not followed "
            "below a dataset root (give the real path)"
        )
    if error.errno == errno.ENOENT:
        return f"path {given!r}: {part!r} does not exist"
    return f"path {given!r}: {part!r} cannot be opened ({error.strerror})"


def _allows(st: os.stat_result, account: Account, bits: int) -> bool:
    if st.st_uid == account.uid:
        shift = 6
    elif st.st_gid in account.groups:
        shift = 3
    else:
        shift = 0
    return (st.st_mode >> shift) & bits == bits


def check_readable(path: str, account: Account | None) -> None:
    """:class:`PermissionDenied` unless ``account`` (None: this server) may reach and read
    the directory ``path``."""
    if account is None:
        if not os.access(path, os.R_OK | os.X_OK):
            raise PermissionDenied(f"path {path!r}: the pool cannot read it (check its mode)")
        return
    chain = ["/"]
    for part in [p for p in path.split("/") if p]:
        chain.append(posixpath.join(chain[-1], part))
    for i, step in enumerate(chain):
        st = os.stat(step)
        need = (_R | _X) if i == len(chain) - 1 else _X
        if not _allows(st, account, need):
            raise PermissionDenied(_unreadable(path, step, account))


def _unreadable(path: str, step: str, account: Account) -> str:
    return (
        f"path {path!r}: {account.name}, the OS account your jobs run as, may not read "
        f"{step!r}; a dataset holds only what your account can read (fix the mode, or ask an "
        "admin)"
    )


def hash_tree(path: str, account: Account | None) -> Manifest:
    """The manifest of the directory ``path`` (module docstring's rules)."""
    top = os.open(path, _DIR)
    files: list[ManifestFile] = []
    try:
        for dirpath, _dirs, names, dir_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            here = posixpath.normpath(dirpath)
            _check_dir(path, here, os.fstat(dir_fd), account)
            for name in sorted(names):
                relative = name if here == "." else f"{here}/{name}"
                found = _hash_entry(path, relative, name, dir_fd, account)
                if found is not None:
                    files.append(found)
                    if len(files) > MAX_FILES:
                        raise TooLarge(
                            f"{path} holds more than {MAX_FILES} files; pack them into "
                            "shards (tar or webdataset archives) and make the dataset of those"
                        )
    finally:
        os.close(top)
    return Manifest(files=sorted(files, key=lambda f: f.path))


def _check_dir(path: str, here: str, st: os.stat_result, account: Account | None) -> None:
    if account is not None and not _allows(st, account, _R | _X):
        raise PermissionDenied(_unreadable(path, posixpath.join(path, here), account))


def _hash_entry(
    path: str, relative: str, name: str, dir_fd: int, account: Account | None
) -> ManifestFile | None:
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        return None  # links, sockets, devices: neither followed nor listed
    try:
        # Not blocking (a FIFO swapped in since the stat), and judged by what was opened.
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None  # a link swapped in since the stat: not followed
        raise
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode):
        os.close(fd)
        return None
    if account is not None and not _allows(opened, account, _R):
        os.close(fd)
        raise PermissionDenied(_unreadable(path, posixpath.join(path, relative), account))
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "rb") as data:
        while chunk := data.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return ManifestFile(path=relative, size=size, sha256=digest.hexdigest())


def write_chunk(archive: Path, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` of ``archive``, dropping whatever lay past ``offset`` (a
    chunk whose write was cut short and not counted)."""
    fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def unpack_upload(archive: Path, dest: Path, *, max_bytes: int) -> None:
    """Unpack the tar ``archive`` into the new directory ``dest`` (module docstring's rules);
    ``dest`` is removed again when it is refused."""
    dest.mkdir(mode=0o755)
    os.chmod(dest, 0o755)  # noqa: S103 - readable by the accounts it is mounted for
    try:
        try:
            unpack_layer(archive, dest, max_bytes=max_bytes, max_entries=2 * MAX_FILES)
        except ImageTooLarge:
            raise TooLarge(
                f"the archive unpacks to more than {max_bytes} bytes (GPUYARD_DATASET_UPLOAD_MAX)"
            ) from None
        except ImageError as error:
            raise InvalidSpec(
                f"the upload is not a dataset archive: {error.detail.replace('layer', 'archive')}"
            ) from None
        _settle(dest)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _settle(dest: Path) -> None:
    """Refuse links out of ``dest``; make every entry the pool's and readable by all."""
    root = os.open(dest, _DIR)
    owner = (os.geteuid(), os.getegid()) if os.geteuid() == 0 else None
    try:
        for dirpath, dirs, names, dir_fd in os.fwalk(".", dir_fd=root, follow_symlinks=False):
            here = posixpath.normpath(dirpath)
            for name in [*dirs, *names]:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    _check_link(here, name, os.readlink(name, dir_fd=dir_fd))
                    continue
                if owner is not None:
                    os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)
                executable = stat.S_ISDIR(st.st_mode) or st.st_mode & 0o100
                os.chmod(name, 0o755 if executable else 0o644, dir_fd=dir_fd)
    finally:
        os.close(root)


def _check_link(here: str, name: str, target: str) -> None:
    inside = posixpath.normpath(posixpath.join(here, target))
    if target.startswith("/") or inside == ".." or inside.startswith("../"):
        where = name if here == "." else f"{here}/{name}"
        raise InvalidSpec(
            f"the archive's link {where} -> {target} points out of the dataset; a dataset's "
            "links stay inside it (make it relative, or copy the file in)"
        )
