"""Image archives a user uploads, read into a checked OCI image layout (docs/images.md,
"Pushing an image").

Three forms are taken, all as one tar (optionally gzip-compressed):

- an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/…``), which is also
  what an OCI archive holds;
- a docker archive (``docker save``: ``manifest.json`` naming a config file and layer tars),
  turned into an OCI layout here (its layers are uncompressed tars; docker 25 and later also
  write an ``index.json``, which is preferred).

An archive is untrusted: only regular files and directories are extracted; an absolute name,
a ``..`` component, a link, a device, a name given twice, more than ``MAX_MEMBERS`` members or
more than ``max_bytes`` extracted refuses the whole archive (``BadArchive``, 422). Every blob
the image's manifest names must be there and hash to its digest and size.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from gpuyard.errors import InvalidSpec
from gpuyard.images.errors import ImageError
from gpuyard.models.image import (
    DIGEST_PATTERN,
    INDEX_TYPES,
    Descriptor,
    ImageManifest,
    ManifestError,
    MediaType,
    parse_manifest,
)

__all__ = ["MAX_MEMBERS", "BadArchive", "LayoutImage", "check_layout", "read_archive"]

MAX_MEMBERS = 10_000
_MAX_JSON = 8 << 20
_CHUNK = 1 << 20


class BadArchive(InvalidSpec, ImageError):
    """An upload that is not a safe, whole image archive (an ``invalid_spec``, 422)."""


class LayoutImage:
    """The image of a checked layout: its directory, manifest digest and manifest."""

    def __init__(self, layout: Path, digest: str, manifest: ImageManifest) -> None:
        self.layout = layout
        self.digest = digest
        self.manifest = manifest


def read_archive(archive: Path, dest: Path, *, max_bytes: int) -> LayoutImage:
    """Extract ``archive`` into the empty directory ``dest`` and return its image as a
    checked OCI layout (a docker archive is converted in place)."""
    _extract(archive, dest, max_bytes=max_bytes)
    if not (dest / "index.json").is_file():
        if not (dest / "manifest.json").is_file():
            raise BadArchive(
                "the archive holds neither index.json (an OCI layout or archive) nor "
                "manifest.json (docker save): upload one of those"
            )
        _docker_to_layout(dest)
    return check_layout(dest)


def _member_path(member: tarfile.TarInfo) -> PurePosixPath | None:
    """The member's relative path; None for the archive's root entry."""
    name = member.name
    if name.startswith("/"):
        raise BadArchive(f"archive member {name!r} is absolute; archives hold relative paths")
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if ".." in parts:
        raise BadArchive(f"archive member {name!r} has a '..' component; refused")
    return PurePosixPath(*parts) if parts else None


def _extract(archive: Path, dest: Path, *, max_bytes: int) -> None:
    total, seen = 0, set()
    try:
        with tarfile.open(archive, "r:*") as tar:
            for count, member in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise BadArchive(f"the archive has more than {MAX_MEMBERS} members")
                path = _member_path(member)
                if path is None:
                    continue
                if path in seen:
                    raise BadArchive(f"archive member {member.name!r} appears twice")
                seen.add(path)
                if member.isdir():
                    (dest / path).mkdir(parents=True, exist_ok=True, mode=0o700)
                    continue
                if not member.isfile():
                    raise BadArchive(
                        f"archive member {member.name!r} is a link or a special file; an image "
                        "archive holds regular files only"
                    )
                total += member.size
                if total > max_bytes:
                    raise BadArchive(f"the archive unpacks to more than {max_bytes} bytes")
                _write_member(tar, member, dest / path)
    except (tarfile.TarError, EOFError, OSError) as error:
        raise BadArchive(f"the upload is not a readable tar archive ({error})") from None


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    source = tar.extractfile(member)
    if source is None:
        raise BadArchive(f"archive member {member.name!r} cannot be read")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with source, os.fdopen(os.open(target, flags, 0o600), "wb") as out:
        while chunk := source.read(_CHUNK):
            out.write(chunk)


def _json(path: Path, what: str) -> Any:
    if not path.is_file() or path.stat().st_size > _MAX_JSON:
        raise BadArchive(f"{what} is missing or larger than {_MAX_JSON} bytes")
    try:
        return json.loads(path.read_bytes())
    except ValueError:
        raise BadArchive(f"{what} is not JSON") from None


def _hash(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as data:
        while chunk := data.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return "sha256:" + digest.hexdigest(), size


def _blob(layout: Path, digest: str) -> Path:
    if not DIGEST_PATTERN.fullmatch(digest):
        raise BadArchive(f"{digest!r} is not a sha256 digest")
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _add_blob(layout: Path, source: Path) -> dict[str, Any]:
    """Move ``source`` into the layout's blobs; its descriptor (without a media type)."""
    digest, size = _hash(source)
    target = _blob(layout, digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        source.unlink()  # the same bytes twice (a docker archive may repeat a layer)
    else:
        os.replace(source, target)
    return {"digest": digest, "size": size}


def _inside(root: Path, name: Any, what: str) -> Path:
    if not isinstance(name, str):
        raise BadArchive(f"manifest.json: {what} must be a path")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise BadArchive(f"manifest.json: {what} {name!r} leaves the archive")
    found = root / path
    if not found.is_file():
        raise BadArchive(f"manifest.json names {name!r}, which the archive lacks")
    return found


def _docker_to_layout(root: Path) -> None:
    """Write ``index.json`` and an OCI manifest for the first image of ``manifest.json``."""
    entries = _json(root / "manifest.json", "manifest.json")
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        raise BadArchive("manifest.json must list at least one image")
    first = entries[0]
    layers = first.get("Layers")
    if not isinstance(layers, list) or not layers:
        raise BadArchive("manifest.json: the image has no Layers")
    config = _add_blob(root, _inside(root, first.get("Config"), "Config"))
    config["mediaType"] = MediaType.OCI_CONFIG
    descriptors = []
    for layer in layers:
        path = _inside(root, layer, "a layer")
        layer_digest = _hash(path)[0]
        if _blob(root, layer_digest) == path:
            descriptors.append({"digest": layer_digest, "size": path.stat().st_size})
        else:
            descriptors.append(_add_blob(root, path))
        descriptors[-1]["mediaType"] = MediaType.OCI_LAYER
    manifest = {"schemaVersion": 2, "mediaType": MediaType.OCI_MANIFEST, "config": config}
    manifest["layers"] = descriptors
    body = root / "manifest.oci.json"
    body.write_bytes(json.dumps(manifest).encode())
    entry = _add_blob(root, body)
    entry["mediaType"] = MediaType.OCI_MANIFEST
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))


def _check_blob(layout: Path, descriptor: Descriptor) -> Path:
    path = _blob(layout, descriptor.digest)
    if not path.is_file():
        raise BadArchive(f"the archive lacks blob {descriptor.digest}")
    if _hash(path) != (descriptor.digest, descriptor.size):
        raise BadArchive(f"blob {descriptor.digest} does not match its digest or size")
    return path


def check_layout(layout: Path) -> LayoutImage:
    """The first image of the layout, with every blob it names verified."""
    index = _json(layout / "index.json", "index.json")
    entries = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(entries, list) or not entries:
        raise BadArchive("index.json lists no image")
    try:
        entry = Descriptor.from_json(entries[0])
        if entry.media_type in INDEX_TYPES:
            raise BadArchive("the layout's first entry is an index; push one image at a time")
        body = _check_blob(layout, entry).read_bytes()
        found = parse_manifest(json.loads(body), entry.media_type)
    except (ManifestError, ValueError) as error:
        raise BadArchive(f"the image's manifest cannot be read: {error}") from None
    if not isinstance(found, ImageManifest) or not found.layers:
        raise BadArchive("the layout's first entry is not an image manifest with layers")
    for blob in (found.config, *found.layers):
        _check_blob(layout, blob)
    return LayoutImage(layout, entry.digest, found)
