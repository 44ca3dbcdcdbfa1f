"""A throwaway OCI registry for tests, and small images built from local files.

Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1 and a free port, with a
self-signed certificate, bcrypt htpasswd for two users and storage in a temporary directory:
nothing anonymous, set up as the pool's own registry is (:mod:`gpuyard.images.local_registry`).
The images are OCI image layouts written here from a busybox-static rootfs with a distinctive
``/etc/os-release``, so tests need no internet. ``make setup`` installs the packages.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import platform
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gpuyard.images.local_registry import (
    free_port,
    make_certificate,
    missing_tools,
    wait_ready,
    write_config,
    write_htpasswd,
)
from gpuyard.images.registry import Credentials, RegistryClient
from gpuyard.models.image import ImageRef, MediaType, go_architecture
from gpuyard.settings import Settings

__all__ = [
    "NODE_ARCH",
    "OS_RELEASE",
    "USERS",
    "LayerBlob",
    "PushedImage",
    "TestRegistry",
    "busybox_layer",
    "docker_archive",
    "layout_archive",
    "registry_server",
    "tar_layer",
    "unavailable_reason",
    "write_layout",
    "write_layout_blobs",
]

OS_RELEASE = b'ID=gpuyard-test\nPRETTY_NAME="gpuyard test image (busybox)"\n'
BUSYBOX = Path("/bin/busybox")
NODE_ARCH = go_architecture(platform.machine())
USERS = {"alice": "alice-secret-1", "bob": "bob-secret-2"}


def unavailable_reason() -> str | None:
    """Why the registry tests cannot run here, or None if they can."""
    missing = missing_tools() + ([] if shutil.which("busybox") else ["busybox-static"])
    if missing:
        return f"missing {', '.join(missing)}: install them with `make setup` (apt-get)"
    return None


@dataclass(frozen=True)
class TestRegistry:
    """A running registry: its URL, CA file, users and on-disk storage."""

    __test__ = False  # not a pytest class

    url: str
    ca_file: Path
    storage: Path
    log: Path
    users: dict[str, str]

    @property
    def host(self) -> str:
        """HOST:PORT, as an image reference or ``GPUYARD_IMAGE_SOURCES`` names it."""
        return httpx.URL(self.url).netloc.decode()

    def pool_settings(self, home: Path, **overrides: Any) -> Settings:
        """The settings of a pool in ``home`` whose registry this is, reached as alice."""
        fields: dict[str, Any] = {
            "home": home,
            "registry": self.url,
            "registry_ca": self.ca_file,
            "registry_user": "alice",
            "registry_password": self.users["alice"],
        }
        return Settings(**{**fields, **overrides})

    def credentials(self, user: str) -> Credentials:
        return Credentials(user, self.users[user])

    def client(self, user: str | None = "alice", **kwargs: Any) -> RegistryClient:
        creds = self.credentials(user) if user else None
        return RegistryClient(self.url, credentials=creds, ca_file=self.ca_file, **kwargs)

    def blob_path(self, digest: str) -> Path:
        """Where the registry keeps a blob's bytes (to tamper with them)."""
        hexdigest = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"


@dataclass(frozen=True)
class PushedImage:
    """An image the tests pushed: its reference, manifest digest and OCI layout."""

    ref: ImageRef
    digest: str
    layout: Path


@contextlib.contextmanager
def registry_server(users: dict[str, str] | None = None) -> Iterator[TestRegistry]:
    """Start the registry; stop it and delete its storage on exit."""
    users = users or USERS
    with tempfile.TemporaryDirectory(prefix="gpuyard-registry-") as name:
        directory = Path(name)
        cert, key = make_certificate(directory, days=2)
        # Bcrypt's lowest cost, so logins stay cheap on a loaded test machine.
        write_htpasswd(directory / "htpasswd", users, cost=4)
        port = free_port()
        config = write_config(
            directory,
            port=port,
            cert=cert,
            key=key,
            realm="gpuyard-test",
            storage=directory / "storage",
        )
        log = directory / "registry.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["docker-registry", "serve", str(config)], stdout=out, stderr=subprocess.STDOUT
            )
        url = f"https://127.0.0.1:{port}"
        try:
            wait_ready(url, cert, process, log)
            yield TestRegistry(url, cert, directory / "storage", log, dict(users))
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def tar_layer(entries: Sequence[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    """A gzip tar layer of ``(name, data)`` files or ready ``TarInfo``s (data-less ones)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
                continue
            info = tarfile.TarInfo(entry[0])
            info.size, info.mode, info.mtime = len(entry[1]), 0o755, 1_700_000_000
            tar.addfile(info, io.BytesIO(entry[1]))
    return gzip.compress(buffer.getvalue(), mtime=0)


def busybox_layer(os_release: bytes = OS_RELEASE) -> bytes:
    """A rootfs layer: busybox-static as /bin/busybox, /bin/sh and a few applets, and
    ``/etc/os-release``."""
    links = []
    for applet in ("sh", "cat", "ls", "echo", "id", "env"):
        info = tarfile.TarInfo(f"bin/{applet}")
        info.type, info.linkname, info.mtime = tarfile.SYMTYPE, "busybox", 1_700_000_000
        links.append(info)
    return tar_layer(
        [("bin/busybox", BUSYBOX.read_bytes()), *links, ("etc/os-release", os_release)]
    )


def _write_blob(layout: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


@dataclass(frozen=True)
class LayerBlob:
    """A layer already written to a layout's blobs: its digest, size and uncompressed digest."""

    digest: str
    size: int
    diff_id: str
    compressed: bool = True


def write_layout(
    layout: Path,
    layers: Sequence[bytes],
    *,
    architecture: str,
    config: dict[str, Any] | None = None,
) -> str:
    """Write an OCI image layout of gzip ``layers`` (bottom first); the manifest's digest."""
    (layout / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    blobs = [
        LayerBlob(
            **_write_blob(layout, layer),
            diff_id="sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest(),
        )
        for layer in layers
    ]
    return write_layout_blobs(layout, blobs, architecture=architecture, config=config)


def write_layout_blobs(
    layout: Path,
    layers: Sequence[LayerBlob],
    *,
    architecture: str,
    config: dict[str, Any] | None = None,
) -> str:
    """Write an OCI image layout's config, manifest and index for layers whose blobs are in
    ``layout`` already (bottom first); the manifest's digest."""
    (layout / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    image_config = {
        "architecture": architecture,
        "os": "linux",
        "config": config or {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": MediaType.OCI_MANIFEST,
        "config": {
            "mediaType": MediaType.OCI_CONFIG,
            **_write_blob(layout, json.dumps(image_config).encode()),
        },
        "layers": [
            {
                "mediaType": MediaType.OCI_LAYER_GZIP if layer.compressed else MediaType.OCI_LAYER,
                "digest": layer.digest,
                "size": layer.size,
            }
            for layer in layers
        ],
    }
    entry = {
        "mediaType": MediaType.OCI_MANIFEST,
        **_write_blob(layout, json.dumps(manifest).encode()),
    }
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    return str(entry["digest"])


def layout_archive(layout: Path, dest: Path) -> Path:
    """``layout`` as one tar (an OCI archive), at ``dest``."""
    with tarfile.open(dest, "w") as tar:
        for path in sorted(layout.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
    return dest


def docker_archive(dest: Path, layers: Sequence[bytes], *, architecture: str) -> Path:
    """What ``docker save`` writes for an image of gzip ``layers`` (stored uncompressed, one
    ``<n>/layer.tar`` each, with ``manifest.json`` and the config), at ``dest``."""
    plain = [gzip.decompress(layer) for layer in layers]
    config = {
        "architecture": architecture,
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(p).hexdigest() for p in plain],
        },
    }
    files = {"config.json": json.dumps(config).encode()}
    files.update({f"{n}/layer.tar": data for n, data in enumerate(plain)})
    manifest = [
        {
            "Config": "config.json",
            "RepoTags": ["x:1"],
            "Layers": [f"{n}/layer.tar" for n in range(len(plain))],
        }
    ]
    files["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(dest, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dest
