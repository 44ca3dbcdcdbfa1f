"""The registry client against a real registry (TLS, htpasswd): resolve, fetch, refuse."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from gpuyard.images.errors import (
    DigestMismatch,
    ImageNotFound,
    RegistryUnavailable,
    Unauthorized,
    WrongArchitecture,
)
from gpuyard.images.registry import Credentials, RegistryClient
from gpuyard.models.image import ImageRef
from gpuyard.testing.registry import (
    NODE_ARCH,
    USERS,
    PushedImage,
    TestRegistry,
    busybox_layer,
    tar_layer,
    write_layout,
)


def test_push_then_resolve_gives_the_layout_digest(
    registry: TestRegistry, busybox_image: PushedImage
) -> None:
    with registry.client("alice") as client:
        assert client.resolve(busybox_image.ref) == busybox_image.digest
        image = client.image(busybox_image.ref.pinned(busybox_image.digest))
        config = client.config(busybox_image.ref, image.manifest)
    assert image.digest == busybox_image.digest and len(image.manifest.layers) == 2
    assert config.cmd == ("/bin/sh",) and config.architecture == NODE_ARCH


def test_pushing_again_skips_the_blobs_the_registry_has(
    registry: TestRegistry, busybox_image: PushedImage
) -> None:
    before = registry.log.read_text().count('"POST /v2/alice/busybox/blobs/uploads/')
    assert before >= 3  # the first push uploaded the config and both layers
    with registry.client("alice") as client:
        client.push(busybox_image.layout, ImageRef.parse("alice/busybox:again"))
    assert registry.log.read_text().count('"POST /v2/alice/busybox/blobs/uploads/') == before


def test_a_blob_download_is_verified(
    registry: TestRegistry, busybox_image: PushedImage, tmp_path: Path
) -> None:
    with registry.client("alice") as client:
        layer = client.image(busybox_image.ref).manifest.layers[1]
        client.blob(busybox_image.ref, layer, tmp_path / "layer")
    assert "sha256:" + hashlib.sha256((tmp_path / "layer").read_bytes()).hexdigest() == layer.digest


def test_a_tampered_blob_is_a_digest_mismatch_and_leaves_no_file(
    registry: TestRegistry, tmp_path: Path
) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [tar_layer([("f", b"original")])], architecture=NODE_ARCH)
    ref = ImageRef.parse("alice/tampered:1")
    with registry.client("alice") as client:
        client.push(layout, ref)
        layer = client.image(ref).manifest.layers[0]
        stored = registry.blob_path(layer.digest)
        stored.write_bytes(tar_layer([("f", b"evil!!!!")])[: layer.size].ljust(layer.size, b"\0"))
        with pytest.raises(DigestMismatch, match=layer.digest):
            client.blob(ref, layer, tmp_path / "layer")
    assert not (tmp_path / "layer").exists()


def test_unknown_repository_and_tag_are_not_found(registry: TestRegistry) -> None:
    with registry.client("alice") as client:
        with pytest.raises(ImageNotFound, match="alice/nothing:1"):
            client.resolve(ImageRef.parse("alice/nothing:1"))
        with pytest.raises(ImageNotFound):
            client.resolve(ImageRef.parse("alice/busybox:no-such-tag"))


def test_anonymous_and_wrong_passwords_are_refused_without_leaking_them(
    registry: TestRegistry, busybox_image: PushedImage
) -> None:
    with registry.client(None) as anonymous, pytest.raises(Unauthorized, match="401"):
        anonymous.resolve(busybox_image.ref)
    for wrong in (Credentials("alice", "not-the-password"), Credentials("alice", USERS["bob"])):
        client = RegistryClient(registry.url, credentials=wrong, ca_file=registry.ca_file)
        with client, pytest.raises(Unauthorized) as refused:
            client.resolve(busybox_image.ref)
        shown = str(refused.value) + repr(client) + repr(wrong)
        assert "not-the-password" not in shown and USERS["bob"] not in shown
    assert "alice-secret" not in repr(registry.credentials("alice"))


def test_tls_is_verified_by_default(registry: TestRegistry, busybox_image: PushedImage) -> None:
    client = RegistryClient(registry.url, credentials=registry.credentials("alice"))
    with client, pytest.raises(RegistryUnavailable, match="CA file"):
        client.resolve(busybox_image.ref)


def test_a_registry_that_is_down_is_unavailable(registry: TestRegistry) -> None:
    client = RegistryClient("https://127.0.0.1:9", ca_file=registry.ca_file, timeout=5)
    with client, pytest.raises(RegistryUnavailable, match="cannot be reached"):
        client.resolve(ImageRef.parse("alice/busybox:1"))


def test_an_index_without_our_architecture_names_what_it_has(
    registry: TestRegistry, tmp_path: Path
) -> None:
    layout = tmp_path / "other"
    write_layout(layout, [busybox_layer()], architecture="s390x")
    entry = json.loads((layout / "index.json").read_text())["manifests"][0]
    entry["platform"] = {"architecture": "s390x", "os": "linux"}
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [entry],
        }
    ).encode()
    with registry.client("alice") as client:
        ref = ImageRef.parse("alice/s390x:1")
        client.push(layout, ref)
        client._request(
            "PUT",
            "alice/s390x/manifests/multi",
            "index",
            content=index,
            headers={"Content-Type": "application/vnd.oci.image.index.v1+json"},
        )
        with pytest.raises(WrongArchitecture, match="linux/s390x"):
            client.resolve(ImageRef.parse("alice/s390x:multi"))
        image = client.image(ref)
        with pytest.raises(WrongArchitecture, match="built for linux/s390x"):
            client.config(ref, image.manifest)
    shutil.rmtree(layout)
