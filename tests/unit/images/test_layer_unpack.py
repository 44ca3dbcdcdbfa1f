"""Safe layer unpacking (images/unpack.py): real tar files, crafted to attack the root.

Every test unpacks into ``tmp/root`` beside a sentinel directory ``tmp/outside`` and checks
that the sentinel is unchanged.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuyard.images.errors import ImageError, ImageTooLarge, UnsafeLayer, UnsupportedLayer
from gpuyard.images.unpack import unpack_layer


@dataclass(frozen=True)
class Entry:
    name: str
    kind: bytes = tarfile.REGTYPE
    data: bytes = b""
    link: str = ""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0


def file(name: str, data: bytes = b"x", **kw: int) -> Entry:
    return Entry(name, tarfile.REGTYPE, data, **kw)  # type: ignore[arg-type]


def directory(name: str, mode: int = 0o755) -> Entry:
    return Entry(name, tarfile.DIRTYPE, mode=mode)


def symlink(name: str, target: str) -> Entry:
    return Entry(name, tarfile.SYMTYPE, link=target, mode=0o777)


def hardlink(name: str, target: str) -> Entry:
    return Entry(name, tarfile.LNKTYPE, link=target)


def layer(path: Path, entries: list[Entry], *, compress: bool = False) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.type = entry.kind
            info.mode, info.uid, info.gid = entry.mode, entry.uid, entry.gid
            info.linkname = entry.link
            info.size = len(entry.data) if entry.kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(entry.data) if info.size else None)
    data = buffer.getvalue()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host data")
    return tmp_path / "root"


def outside_unchanged(root: Path) -> bool:
    outside = root.parent / "outside"
    return sorted(p.name for p in outside.iterdir()) == ["secret"] and (
        (outside / "secret").read_text() == "host data"
    )


def apply(root: Path, *entries: Entry, compress: bool = False) -> None:
    count = len(list(root.parent.glob("layer*.tar")))
    unpack_layer(layer(root.parent / f"layer{count}.tar", list(entries), compress=compress), root)


def test_files_dirs_and_links_unpack_with_their_modes(root: Path) -> None:
    apply(
        root,
        directory("etc", 0o755),
        file("etc/os-release", b"ID=test\n"),
        file("bin/tool", b"#!", mode=0o755),
        symlink("usr", "/"),
        hardlink("etc/alias", "etc/os-release"),
        directory("ro", 0o555),
        file("ro/inside"),
        compress=True,
    )
    assert (root / "etc/os-release").read_bytes() == b"ID=test\n"
    assert os.stat(root / "etc/alias").st_ino == os.stat(root / "etc/os-release").st_ino
    assert stat.S_IMODE(os.stat(root / "bin/tool").st_mode) == 0o755
    assert os.readlink(root / "usr") == "/"
    assert stat.S_IMODE(os.stat(root / "ro").st_mode) == 0o555
    assert outside_unchanged(root)


@pytest.mark.parametrize("name", ["../escape", "a/../../escape", "./../escape"])
def test_dotdot_paths_are_refused(root: Path, name: str) -> None:
    with pytest.raises(UnsafeLayer, match="climbs out"):
        apply(root, file(name))
    assert outside_unchanged(root)
    assert not (root.parent / "escape").exists()


def test_absolute_paths_land_inside_the_root(root: Path) -> None:
    apply(root, file(f"{root.parent}/outside/secret", b"overwritten"), file("/etc/x"))
    assert outside_unchanged(root)
    assert (root / str(root.parent).lstrip("/") / "outside/secret").read_bytes() == b"overwritten"
    assert (root / "etc/x").exists()


@pytest.mark.parametrize("target", ["ABS", "../../outside", "../../../../../../ABS"])
def test_a_symlink_out_of_the_root_is_resolved_inside_it(root: Path, target: str) -> None:
    target = target.replace("ABS", str(root.parent / "outside").lstrip("/"))
    target = "/" + target if not target.startswith("..") else target
    apply(root, symlink("evil", target), file("evil/secret", b"pwned"), file("evil/new", b"x"))
    assert outside_unchanged(root)
    assert (root / "evil").is_symlink()


def test_a_symlink_planted_by_an_earlier_layer_is_not_followed_out(root: Path) -> None:
    apply(root, symlink("etc", str(root.parent / "outside")))
    apply(root, file("etc/secret", b"pwned"), directory("etc/sub"), file("etc/sub/f"))
    apply(root, symlink("dotdot", "../.."), file("dotdot/outside/secret", b"pwned"))
    assert outside_unchanged(root)
    assert (root / str(root.parent).lstrip("/") / "outside/secret").read_bytes() == b"pwned"


def test_an_entry_replaces_a_symlink_instead_of_writing_through_it(root: Path) -> None:
    apply(root, symlink("secret", str(root.parent / "outside/secret")))
    apply(root, file("secret", b"pwned"))
    assert outside_unchanged(root)
    assert (root / "secret").read_bytes() == b"pwned" and not (root / "secret").is_symlink()


def test_a_hardlink_never_reaches_a_host_file(root: Path) -> None:
    with pytest.raises(UnsafeLayer, match="climbs out"):
        apply(root, hardlink("h", "../outside/secret"))
    with pytest.raises(UnsafeLayer, match="not in the image"):
        apply(root, hardlink("h", str(root.parent / "outside/secret")))
    apply(root, symlink("up", "/.."), file("x"))
    with pytest.raises(UnsafeLayer, match="not in the image"):
        apply(root, hardlink("h2", "up/outside/secret"))
    assert outside_unchanged(root)
    assert os.stat(root.parent / "outside/secret").st_nlink == 1


def test_symlink_loops_are_refused(root: Path) -> None:
    with pytest.raises(UnsafeLayer, match="too many symbolic links"):
        apply(root, symlink("a", "b"), symlink("b", "a"), file("a/x"))
    assert outside_unchanged(root)


def test_whiteouts_delete_lower_entries_inside_the_root_only(root: Path) -> None:
    apply(root, file("keep"), file("gone"), file("dir/old"), file("dir/older"), symlink("s", "/"))
    apply(root, file(".wh.gone"), file("dir/.wh..wh..opq"), file("dir/new"), file("s/.wh.keep2"))
    assert sorted(p.name for p in root.iterdir()) == ["dir", "keep", "s"]
    assert sorted(p.name for p in (root / "dir").iterdir()) == ["new"]
    with pytest.raises(UnsafeLayer, match="climbs out"):
        apply(root, file("../../outside/.wh.secret"))
    with pytest.raises(UnsafeLayer, match=r"whiteout of '\.'"):
        apply(root, file(".wh.."))
    apply(root, symlink("o", str(root.parent / "outside")), file("o/.wh.secret"))
    apply(root, file(f"{root.parent}/outside/.wh..wh..opq"))
    assert outside_unchanged(root)


def test_a_whiteout_in_the_same_layer_as_its_file_keeps_it(root: Path) -> None:
    apply(root, file("f"), file(".wh.f"))
    assert (root / "f").exists()


def test_devices_and_fifos_are_skipped(root: Path) -> None:
    apply(
        root,
        Entry("dev/sda", tarfile.BLKTYPE),
        Entry("dev/null", tarfile.CHRTYPE),
        Entry("fifo", tarfile.FIFOTYPE),
        file("ok"),
    )
    assert not (root / "dev/sda").exists() and not (root / "dev/null").exists()
    assert not (root / "fifo").exists() and (root / "ok").exists()
    assert outside_unchanged(root)


def test_setuid_and_setgid_bits_are_stripped_and_owners_kept(root: Path) -> None:
    apply(root, file("su", mode=0o4755, uid=1234, gid=5678), directory("sg", 0o3775))
    info = os.stat(root / "su")
    assert stat.S_IMODE(info.st_mode) == 0o755
    assert stat.S_IMODE(os.stat(root / "sg").st_mode) == 0o1775
    if os.geteuid() == 0:
        assert (info.st_uid, info.st_gid) == (1234, 5678)


def test_a_layer_larger_than_its_allowance_stops(root: Path) -> None:
    path = layer(root.parent / "big.tar", [file("big", b"x" * 1000)])
    with pytest.raises(ImageTooLarge, match="more than the 999 bytes"):
        unpack_layer(path, root, max_bytes=999)


def test_zstd_and_garbage_layers_get_a_clear_error(root: Path) -> None:
    zstd = root.parent / "z"
    zstd.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 600)
    with pytest.raises(UnsupportedLayer, match="zstd"):
        unpack_layer(zstd, root)
    garbage = root.parent / "g"
    garbage.write_bytes(gzip.compress(b"not a tar" * 100))
    with pytest.raises(UnsupportedLayer, match="not a readable tar"):
        unpack_layer(garbage, root)


def test_an_entry_the_system_cannot_apply_is_an_image_error(root: Path) -> None:
    with pytest.raises(ImageError, match="could not be applied"):
        apply(root, symlink("long", "x" * 5000))
    assert outside_unchanged(root)


def test_a_layer_of_too_many_entries_is_refused(root: Path) -> None:
    path = layer(root.parent / "many.tar", [directory(f"d{n}") for n in range(11)])
    with pytest.raises(UnsafeLayer, match="more than 10 entries"):
        unpack_layer(path, root, max_entries=10)
