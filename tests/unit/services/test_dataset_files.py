"""The dataset catalogue's file rules (services/dataset_files.py) on real directories: a path
below a root reached without links, read as the owner's account (mode bits, as the kernel
reads them), the manifest of regular files only, and an upload's archive unpacked safely."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.errors import InvalidSpec, PermissionDenied, TooLarge
from gpuyard.launch.program import Account
from gpuyard.services.dataset_files import (
    check_readable,
    hash_tree,
    resolve_under_roots,
    unpack_upload,
    write_chunk,
)

STRANGER = Account("gpy-stranger", 54321, frozenset({54321}))
"""An account that owns nothing here and is in none of its groups: the others' bits count."""


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A dataset root every account may pass to (pytest's own directories are 0700)."""
    top = Path(tempfile.mkdtemp(prefix="gpuyard-datasets-", dir="/tmp"))
    yield _tree(top)
    for path in top.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(top)


def _tree(top: Path) -> Path:
    base = top / "shared"
    (base / "set" / "sub").mkdir(parents=True)
    (base / "set" / "a.txt").write_text("a")
    (base / "set" / "sub" / "b.bin").write_bytes(b"bb")
    for path in (top, base, base / "set", base / "set" / "sub"):
        path.chmod(0o755)
    for path in (base / "set" / "a.txt", base / "set" / "sub" / "b.bin"):
        path.chmod(0o644)
    return base


def test_a_path_resolves_below_its_root_and_through_an_admins_link_to_it(
    root: Path, tmp_path: Path
) -> None:
    assert resolve_under_roots(str(root / "set" / "sub"), [str(root)]) == str(root / "set" / "sub")
    linked = tmp_path / "data"
    linked.symlink_to(root)  # the admin's root may itself be a link
    assert resolve_under_roots(f"{linked}/set", [str(linked)]) == str(root / "set")
    assert resolve_under_roots(f"{root}/set/", ["/elsewhere", str(root)]) == str(root / "set")


def test_links_below_the_root_are_not_followed(root: Path, tmp_path: Path) -> None:
    (root / "set" / "up").symlink_to(tmp_path)
    (root / "inside").symlink_to(root / "set")  # even one that stays inside
    for path in (root / "set" / "up", root / "inside", root / "set" / "a.txt"):
        with pytest.raises(InvalidSpec, match="link or not a directory"):
            resolve_under_roots(str(path), [str(root)])
    with pytest.raises(InvalidSpec, match=r"'\.\.' are not allowed"):
        resolve_under_roots(f"{root}/set/../set", [str(root)])
    with pytest.raises(InvalidSpec, match="not below a dataset root"):
        resolve_under_roots(f"{root}x/set", [str(root)])  # a prefix is not a parent
    with pytest.raises(InvalidSpec, match="absolute"):
        resolve_under_roots("set", [str(root)])


def test_the_manifest_lists_regular_files_and_never_follows_a_link(
    root: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("do not hash me")
    (root / "set" / "out").symlink_to(secret)
    (root / "set" / "outdir").symlink_to(tmp_path)
    manifest = hash_tree(str(root / "set"), None)
    assert [(f.path, f.size) for f in manifest.files] == [("a.txt", 1), ("sub/b.bin", 2)]
    assert manifest.files[0].sha256 == hashlib.sha256(b"a").hexdigest()


@pytest.mark.skipif(os.geteuid() != 0, reason="another account's view needs files it may not own")
def test_what_the_owners_account_may_not_read_is_refused(root: Path) -> None:
    check_readable(str(root / "set"), STRANGER)
    assert len(hash_tree(str(root / "set"), STRANGER).files) == 2
    (root / "set" / "sub" / "b.bin").chmod(0o600)
    with pytest.raises(PermissionDenied, match=r"gpy-stranger.*may not read .*sub/b\.bin"):
        hash_tree(str(root / "set"), STRANGER)
    (root / "set" / "sub").chmod(0o711)  # passable, not listable
    with pytest.raises(PermissionDenied, match="sub"):
        hash_tree(str(root / "set"), STRANGER)
    (root / "set").chmod(0o700)
    with pytest.raises(PermissionDenied, match="may not read"):
        check_readable(str(root / "set"), STRANGER)
    owner = Account("gpy-owner", os.stat(root).st_uid, frozenset())
    check_readable(str(root / "set"), owner)  # the owner's bits: it may


def _tar(path: Path, entries: list[tarfile.TarInfo], data: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info in entries:
            body = data.get(info.name)
            if body is not None:
                info.size = len(body)
            tar.addfile(info, io.BytesIO(body) if body is not None else None)
    return path


def _file(name: str, mode: int = 0o600, uid: int = 4242) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode, info.uid, info.gid = mode, uid, uid
    return info


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def test_an_upload_unpacks_readable_by_all_and_owned_by_the_pool(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "a.tar",
        [_file("d/x", 0o4700), _file("y"), _link("d/l", "../y")],
        {"d/x": b"x", "y": b"y"},
    )
    dest = tmp_path / "v"
    unpack_upload(archive, dest, max_bytes=1 << 20)
    assert (dest / "d" / "x").stat().st_mode & 0o7777 == 0o755  # no setuid, x kept
    assert (dest / "y").stat().st_mode & 0o7777 == 0o644
    assert os.readlink(dest / "d" / "l") == "../y"
    if os.geteuid() == 0:
        assert (dest / "y").stat().st_uid == 0
    assert [f.path for f in hash_tree(str(dest), None).files] == ["d/x", "y"]


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([_link("l", "/etc/passwd")], "points out of the dataset"),
        ([_link("d/l", "../../x")], "points out of the dataset"),
        ([_file("../x")], "'..'"),
    ],
)
def test_a_hostile_upload_is_refused_and_leaves_nothing(
    tmp_path: Path, entries: list[tarfile.TarInfo], says: str
) -> None:
    archive = _tar(tmp_path / "a.tar", entries, {"../x": b"x"})
    with pytest.raises(InvalidSpec, match=says):
        unpack_upload(archive, tmp_path / "v", max_bytes=1 << 20)
    assert not (tmp_path / "v").exists() and not (tmp_path / "x").exists()


def test_an_upload_that_unpacks_past_the_cap_is_refused(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "a.tar", [_file("big")], {"big": b"\0" * 5000})
    with pytest.raises(TooLarge, match="GPUYARD_DATASET_UPLOAD_MAX"):
        unpack_upload(archive, tmp_path / "v", max_bytes=4096)
    assert not (tmp_path / "v").exists()


def test_a_chunk_replaces_whatever_lay_past_its_offset(tmp_path: Path) -> None:
    archive = tmp_path / "up.tar"
    write_chunk(archive, 0, b"hello")
    write_chunk(archive, 5, b" world, cut sho")  # written, never counted
    write_chunk(archive, 5, b" there")
    assert archive.read_bytes() == b"hello there"
