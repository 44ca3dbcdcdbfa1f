"""Uploaded image archives (images/archive.py): OCI layouts and docker archives are read into
a checked layout; hostile or broken archives are refused whole, with nothing written outside
the directory they are extracted to."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuyard.images.archive import BadArchive, read_archive
from gpuyard.models.image import MediaType
from gpuyard.testing.registry import docker_archive, layout_archive, tar_layer, write_layout

LAYERS = [tar_layer([("etc/os-release", b"ID=test\n")]), tar_layer([("etc/motd", b"hi\n")])]
MAX = 1 << 30


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_an_oci_archive_is_read_as_its_layout(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    digest = write_layout(layout, LAYERS, architecture="amd64")
    archive = layout_archive(layout, tmp_path / "image.tar")
    (tmp_path / "out").mkdir()
    image = read_archive(archive, tmp_path / "out", max_bytes=MAX)
    assert image.digest == digest
    assert len(image.manifest.layers) == 2


def test_a_docker_archive_becomes_an_oci_layout(tmp_path: Path) -> None:
    archive = docker_archive(tmp_path / "saved.tar", LAYERS, architecture="amd64")
    (tmp_path / "out").mkdir()
    image = read_archive(archive, tmp_path / "out", max_bytes=MAX)
    assert [layer.media_type for layer in image.manifest.layers] == [MediaType.OCI_LAYER] * 2
    assert (tmp_path / "out" / "index.json").is_file()
    # Layers are the uncompressed tars, addressed by their own digests.
    plain = [gzip.decompress(layer) for layer in LAYERS]
    assert [layer.digest for layer in image.manifest.layers] == [
        "sha256:" + hashlib.sha256(p).hexdigest() for p in plain
    ]


def _symlink() -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo("index.json")
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return info, None


def _hardlink() -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo("index.json")
    info.type, info.linkname = tarfile.LNKTYPE, "/etc/passwd"
    return info, None


def _device() -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo("dev")
    info.type = tarfile.CHRTYPE
    return info, None


HOSTILE: dict[str, tuple[Callable[[], list[tuple[tarfile.TarInfo, bytes | None]]], str]] = {
    "dotdot": (lambda: [_file("../escaped")], "'..' component"),
    "nested dotdot": (lambda: [_file("blobs/../../escaped")], "'..' component"),
    "absolute": (lambda: [_file("/tmp/escaped")], "is absolute"),
    "symlink": (lambda: [_symlink()], "link or a special file"),
    "hardlink": (lambda: [_hardlink()], "link or a special file"),
    "device": (lambda: [_device()], "link or a special file"),
    "twice": (lambda: [_file("a"), _file("a")], "appears twice"),
    "huge": (lambda: [_file("big", b"x" * 2048)], "more than 1024 bytes"),
    "no image": (lambda: [_file("readme")], "neither index.json"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_and_write_nothing_outside(tmp_path: Path, case: str) -> None:
    members, says = HOSTILE[case]
    archive = _tar(tmp_path / "evil.tar", members())
    out = tmp_path / "deep" / "out"
    out.mkdir(parents=True)
    with pytest.raises(BadArchive, match=says) as raised:
        read_archive(archive, out, max_bytes=1024)
    assert raised.value.status_code == 422
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "evil.tar"]
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["out"]


def test_a_layer_that_does_not_match_its_digest_is_refused(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, LAYERS, architecture="amd64")
    blob = next((layout / "blobs/sha256").iterdir())
    blob.write_bytes(blob.read_bytes() + b"tampered")
    archive = layout_archive(layout, tmp_path / "image.tar")
    (tmp_path / "out").mkdir()
    with pytest.raises(BadArchive, match="does not match its digest"):
        read_archive(archive, tmp_path / "out", max_bytes=MAX)


def test_not_a_tar_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.tar").write_bytes(b"not a tar at all" * 100)
    (tmp_path / "out").mkdir()
    with pytest.raises(BadArchive, match="not a readable tar"):
        read_archive(tmp_path / "x.tar", tmp_path / "out", max_bytes=MAX)
