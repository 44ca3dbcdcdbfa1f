"""Hostile layers by the hundred (hypothesis): whatever entries a layer holds, in any order and
over any earlier layer, unpacking either refuses it with a typed error or writes inside the
root only; the sentinel beside the root never changes."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyard.images.errors import ImageError
from gpuyard.images.unpack import unpack_layer

NAMES = [
    *("a", "b", "a/secret", "a/b", "b/secret", "a/b/secret", "./a//secret", "/a/secret"),
    *("../secret", "a/../../secret", "OUT/secret", "/OUT/secret", "OUT/a"),
    *(".wh.a", "a/.wh.secret", "a/.wh..wh..opq", ".wh..", "a/.wh.b", "b/.wh..wh..opq"),
]
TARGETS = ["/", "..", "../..", "a", "/OUT", "../outside", "/OUT/secret", "../outside/secret"]
KINDS = [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE]

entries = st.lists(
    st.tuples(
        st.sampled_from(NAMES),
        st.sampled_from(KINDS),
        st.sampled_from(TARGETS),
    ),
    min_size=1,
    max_size=8,
)


def _layer(path: Path, chosen: list[tuple[str, bytes, str]], outside: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, target in chosen:
            info = tarfile.TarInfo(name.replace("OUT", str(outside).lstrip("/")))
            info.type, info.mode = kind, 0o4777
            info.linkname = target.replace("OUT", str(outside).lstrip("/"))
            data = b"pwned" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    path.write_bytes(buffer.getvalue())
    return path


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(path): path.read_bytes() if path.is_file() else b"<dir>"
        for path in sorted(directory.rglob("*"))
    }


@settings(max_examples=80, deadline=None)
@given(first=entries, second=entries)
def test_no_layer_writes_outside_its_root(first: list, second: list) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as name:
        base = Path(name)
        outside = base / "outside"
        (outside / "a").mkdir(parents=True)
        (outside / "secret").write_text("host data")
        (base / "root").mkdir()
        before = _snapshot(base / "outside")
        for index, chosen in enumerate((first, second)):
            with contextlib.suppress(ImageError):
                unpack_layer(_layer(base / f"l{index}.tar", chosen, outside), base / "root")
        assert _snapshot(base / "outside") == before
        assert sorted(os.listdir(base)) == ["l0.tar", "l1.tar", "outside", "root"]
        for path in (base / "root").rglob("*"):
            if not path.is_symlink():
                assert not path.stat().st_mode & 0o6000, path
