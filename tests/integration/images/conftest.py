"""One registry for the image tests (TLS, two users), and an image pushed to it once."""

from __future__ import annotations

import pytest

from gpuyard.models.image import ImageRef
from gpuyard.testing.registry import (
    NODE_ARCH,
    PushedImage,
    TestRegistry,
    busybox_layer,
    tar_layer,
    write_layout,
)


@pytest.fixture(scope="session")
def busybox_image(registry: TestRegistry, tmp_path_factory: pytest.TempPathFactory) -> PushedImage:
    """``alice/busybox:1``: the busybox rootfs, then a layer adding /etc/motd."""
    layout = tmp_path_factory.mktemp("busybox-layout")
    layers = [busybox_layer(), tar_layer([("etc/motd", b"hello from the image\n")])]
    write_layout(layout, layers, architecture=NODE_ARCH)
    ref = ImageRef.parse("alice/busybox:1")
    with registry.client("alice") as client:
        digest = client.push(layout, ref)
    return PushedImage(ref, digest, layout)
