"""A test image with Python, torch, numpy, mpi4py and Open MPI, built from this machine's files
without the internet (docs/images.md, "For test authors").

The image is a closure of local files, not a distribution's packages:

- Debian's own Python (``/usr/bin/python3.11`` and its standard library ``/usr/lib/python3.11``),
  ``dash`` as ``/bin/sh`` and busybox's applets for the rest of a shell's tools;
- the Python distributions named in :data:`DISTRIBUTIONS` and what they require, from the
  environment running the tests (its site-packages go to ``/usr/local/lib/python3.11/
  dist-packages``, where Debian's Python looks; files a wheel puts beside the environment,
  such as Open MPI's ``bin/`` and ``lib/``, go under ``/usr/local``);
- every shared library those programs load, found with ``ldd`` (the host's copy, dereferenced);
- an ``/etc/os-release`` of its own (``ID=gpuyard-pytest``), so a job can tell image from host.

One uncompressed layer (the unpacker reads plain tar; gzip of torch would cost most of the
build). The layout is cached on disk under ``.cache/test-images/<key>`` (ignored by git), keyed
by this module's source, every input file's path, size and mtime and the host's
``/etc/ld.so.cache``: built once per machine.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpuyard.testing.registry import NODE_ARCH, LayerBlob, write_layout_blobs

__all__ = ["DISTRIBUTIONS", "IMAGE_ENV", "OS_RELEASE", "build_python_image", "unavailable_reason"]

DISTRIBUTIONS = ("torch", "numpy", "mpi4py", "openmpi")
OS_RELEASE = b'ID=gpuyard-pytest\nPRETTY_NAME="gpuyard test image (python, torch, MPI)"\n'
PYTHON = Path("/usr/bin/python3.11")
STDLIB = Path("/usr/lib/python3.11")
SHELL = Path("/usr/bin/dash")
BUSYBOX = Path("/bin/busybox")
LD_CACHE = Path("/etc/ld.so.cache")
APPLETS = (
    *("cat", "ls", "echo", "id", "env", "hostname", "sleep", "mkdir", "rm", "cp", "mv", "pwd"),
    *("sed", "grep", "awk", "head", "tail", "tr", "cut", "wc", "sort", "dirname", "basename"),
    *("readlink", "realpath", "which", "xargs", "chmod", "touch", "true", "false", "uname"),
    *("ps", "kill", "tee", "mktemp", "test", "printf", "ln", "du", "df", "stat", "find"),
)
"""A shell's usual tools (busybox's): gpuyard's in-job scripts and test jobs use them."""
TARGET_SITE = "usr/local/lib/python3.11/dist-packages"
TARGET_PREFIX = "usr/local"
IMAGE_ENV = (
    "PATH=/usr/local/bin:/usr/bin:/bin",
    "LD_LIBRARY_PATH=/usr/local/lib",
    "OPAL_PREFIX=/usr/local",
)
"""The image's ``Env``: Open MPI's wheel finds its libraries and itself under /usr/local."""
SKIPPED = re.compile(
    r"^torch/(test/|include/|bin/(?!torch_shm_manager$))|^torch/lib/\w*test\w*\.so$"
)
"""What no test job runs: torch's own tests, C++ headers and test programs (a third of it).
The compiled ``__pycache__`` stays: Debian's 3.11 reads the venv's 3.11 bytecode (same magic;
the layer keeps each source's mtime and size), so no worker compiles torch at every start."""
ROOT_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}


def unavailable_reason() -> str | None:
    """Why this image cannot be built here, or None."""
    missing = [str(p) for p in (PYTHON, STDLIB, SHELL, BUSYBOX) if not p.exists()]
    for name in DISTRIBUTIONS:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(f"the {name} distribution (pip install '.[train]')")
    return f"missing {', '.join(missing)}" if missing else None


def _requirements(names: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The distributions ``names`` and everything they require (extras left out)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.split(r"[\s<>=!~;\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in found:
            continue
        try:
            dist = found[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
    return list(found.values())


def _python_files() -> Iterator[tuple[str, Path]]:
    """(path in the image, host file) of the chosen distributions."""
    site = Path(sysconfig.get_paths()["purelib"])
    prefix = Path(sys.prefix)
    for dist in _requirements(DISTRIBUTIONS):
        for file in dist.files or []:
            source = Path(os.path.normpath(site / file))
            if source.is_relative_to(site):
                relative = source.relative_to(site).as_posix()
                if not SKIPPED.search(relative):
                    yield f"{TARGET_SITE}/{relative}", source
            elif source.is_relative_to(prefix) and "/bin/python" not in str(source):
                yield f"{TARGET_PREFIX}/{source.relative_to(prefix).as_posix()}", source


def _base_files() -> Iterator[tuple[str, Path]]:
    yield "usr/bin/python3.11", PYTHON
    yield "usr/bin/dash", SHELL
    yield "usr/bin/busybox", BUSYBOX
    for path in STDLIB.rglob("*"):
        if path.is_file():
            yield path.relative_to("/").as_posix(), path


def _is_elf(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(4) == b"\x7fELF"


def _libraries(files: dict[str, Path]) -> dict[str, Path]:
    """The host's shared libraries the ELF files load that the image does not carry already,
    at their canonical directory (Debian's /lib is /usr/lib)."""
    carried = {source.resolve() for source in files.values()}
    found: dict[str, Path] = {}
    for source in files.values():
        if not (source.suffix == ".so" or ".so." in source.name or "/bin/" in str(source)):
            continue
        if not _is_elf(source):
            continue
        # check=False: ldd fails for a static program, which loads nothing.
        ldd = subprocess.run(["ldd", str(source)], check=False, capture_output=True, text=True)
        out = ldd.stdout
        for match in re.finditer(r"(?:=>\s*)?(/\S+)\s+\(0x", out):
            library = Path(match[1])
            if library.resolve() in carried:
                continue
            canonical = Path(os.path.realpath(library.parent)) / library.name
            found[canonical.relative_to("/").as_posix()] = library
    return found


def _direct(extra: dict[str, Path]) -> dict[str, Path]:
    """The image's files but the libraries they load."""
    files = dict(_base_files())
    files.update(extra)
    files.update(_python_files())
    return files


def _key(files: dict[str, Path]) -> str:
    """The inputs' key: this builder's rules, the files and the host's libraries (ldconfig
    rewrites its cache whenever a package adds or updates one), without running ``ldd``."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    inputs = dict(files)
    if LD_CACHE.exists():
        inputs[str(LD_CACHE)] = LD_CACHE
    for target, source in sorted(inputs.items()):
        stat = source.stat()
        digest.update(f"{target}\0{source}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def _link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 1_700_000_000
    tar.addfile(info)


def _data(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def image_script(data: bytes) -> bytes:
    """A console script of the environment (``torchrun``) as the image runs it: its ``#!``
    names this environment's Python, which the image does not have; the image's instead."""
    if not data.startswith(b"#!"):
        return data
    first, _, rest = data.partition(b"\n")
    if Path(first[2:].decode(errors="replace").strip()).parent != Path(sys.prefix) / "bin":
        return data
    return b"#!/usr/bin/python3\n" + rest


def _write_tar(path: Path, files: dict[str, Path]) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, target in ROOT_LINKS.items():
            _link(tar, name, target)
        for target, source in sorted(files.items()):
            info = tar.gettarinfo(str(source.resolve()), arcname=target)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            if target.startswith(f"{TARGET_PREFIX}/bin/"):
                data = image_script(source.read_bytes())
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            with source.open("rb") as file:
                tar.addfile(info, file)
        _link(tar, "usr/bin/python3", "python3.11")
        _link(tar, "usr/bin/python", "python3.11")
        _link(tar, "usr/bin/sh", "dash")
        for applet in APPLETS:
            if f"usr/bin/{applet}" not in files:
                _link(tar, f"usr/bin/{applet}", "busybox")
        _data(tar, "etc/os-release", OS_RELEASE)
        _data(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        for directory in ("tmp", "root", "home"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)


def build_python_image(cache_root: Path, extra: dict[str, Path] | None = None) -> Path:
    """The image's OCI layout, built under ``cache_root`` unless a build of the same inputs is
    there already; returns the layout directory. ``extra``: more files, by their path in the
    image (relative), such as a job's code that every node must find at the same path."""
    files = _direct({k.lstrip("/"): v for k, v in (extra or {}).items()})
    layout = cache_root / _key(files)
    if (layout / "index.json").exists():
        return layout
    files.update(_libraries(files))
    building = layout.with_name(f"{layout.name}.tmp-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    (building / "blobs/sha256").mkdir(parents=True)
    tar_path = building / "layer.tar"
    _write_tar(tar_path, files)
    digest, size = _sha256(tar_path)
    tar_path.rename(building / "blobs/sha256" / digest)
    layer = LayerBlob(f"sha256:{digest}", size, f"sha256:{digest}", compressed=False)
    config = {"Env": list(IMAGE_ENV), "Cmd": ["python3"]}  # no WorkingDir: the workspace
    write_layout_blobs(building, [layer], architecture=NODE_ARCH, config=config)
    try:
        building.rename(layout)
    except OSError:  # another session built it meanwhile
        shutil.rmtree(building, ignore_errors=True)
    for old in cache_root.iterdir():  # builds of older inputs: most of a GB each
        if old.name != layout.name and ".tmp-" not in old.name:
            shutil.rmtree(old, ignore_errors=True)
    return layout


def _sha256(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


if __name__ == "__main__":  # pragma: no cover - to build it by hand
    print(json.dumps(str(build_python_image(Path(sys.argv[1])))))
