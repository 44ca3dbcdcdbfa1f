"""Copying an image out of another registry into a local OCI layout, for a push into the
pool's (docs/images.md, "Pushing an image"). Only registries an admin listed are reached
(``GPUYARD_IMAGE_SOURCES``): the server never connects where a user points it otherwise. The
image for this node's platform is taken; its config and layers are downloaded verified
against their digests (``RegistryClient.blob``), under a size cap, and a manifest naming them
is written beside them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gpuyard.errors import InvalidSpec, TooLarge
from gpuyard.images.archive import LayoutImage, check_layout
from gpuyard.images.registry import RegistryClient
from gpuyard.models.image import ImageRef, MediaType

__all__ = ["check_source", "check_source_host", "copy_to_layout"]


def check_source(ref: ImageRef, allowed: list[str]) -> str:
    """The registry host of a source reference, if this pool copies from it."""
    host = ref.registry
    if host is None:
        raise InvalidSpec(
            f"{ref} names no registry host; write HOST[:PORT]/REPO:TAG (an image of the "
            "pool's own registry is run by its name, not copied)"
        )
    return check_source_host(host, allowed)


def check_source_host(host: str, allowed: list[str]) -> str:
    """``host``, if this pool copies images from it (the server connects nowhere else)."""
    if host not in allowed:
        listed = ", ".join(allowed) or "none"
        raise InvalidSpec(
            f"registry {host} is not one this pool copies images from ({listed}); ask an "
            "admin to add it to GPUYARD_IMAGE_SOURCES, or push an archive of the image"
        )
    return host


def copy_to_layout(
    client: RegistryClient, ref: ImageRef, dest: Path, *, max_bytes: int
) -> LayoutImage:
    """Download ``ref``'s image (for this node's platform) into the empty directory ``dest``
    as an OCI layout."""
    found = client.image(ref).manifest
    if found.size > max_bytes:
        raise TooLarge(
            f"image {ref} has {found.size} bytes, more than {max_bytes} (GPUYARD_IMAGE_UPLOAD_MAX)"
        )
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for descriptor in (found.config, *found.layers):
        client.blob(ref, descriptor, blobs / descriptor.digest.removeprefix("sha256:"))
    docker = found.config.media_type == MediaType.DOCKER_CONFIG
    manifest = {
        "schemaVersion": 2,
        "mediaType": MediaType.DOCKER_MANIFEST if docker else MediaType.OCI_MANIFEST,
        "config": _descriptor(found.config.media_type, found.config.digest, found.config.size),
        "layers": [_descriptor(d.media_type, d.digest, d.size) for d in found.layers],
    }
    body = json.dumps(manifest).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    (blobs / digest.removeprefix("sha256:")).write_bytes(body)
    entry = _descriptor(str(manifest["mediaType"]), digest, len(body))
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    return check_layout(dest)


def _descriptor(media_type: str, digest: str, size: int) -> dict[str, object]:
    return {"mediaType": media_type, "digest": digest, "size": size}
