"""A node pulling a job's image before its workers start (docs/images.md#pulling), from a real
registry (Debian's docker-registry, TLS, htpasswd): the pull is reported once, a registry that
went away is a reason to wait (:class:`LaunchDeferred`), a layer whose bytes do not match its
digest fails the launch with that reason."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuyard.executors.base import LaunchDeferred, LaunchError
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.node_images import NodeImages
from gpuyard.images.access import RegistryAccess
from gpuyard.images.cache import ImageCache
from gpuyard.models.image import ImageRef
from gpuyard.testing.registry import (
    NODE_ARCH,
    TestRegistry,
    busybox_layer,
    registry_server,
    tar_layer,
    write_layout,
)
from gpuyard.testing.registry import unavailable_reason as registry_unavailable

MakeExecutor = Callable[..., LocalExecutor]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="jobs in images need a pool that runs as root"
)


def _push(registry: TestRegistry, layout: Path, name: str, extra: bytes) -> ImageRef:
    layers = [busybox_layer(), tar_layer([("etc/extra", extra)])]
    write_layout(layout, layers, architecture=NODE_ARCH)
    ref = ImageRef.parse(name)
    with registry.client("alice") as client:
        return ref.pinned(client.push(layout, ref))


def _images(registry: TestRegistry, cache: Path) -> NodeImages:
    access = RegistryAccess(registry.url, registry.ca_file, registry.credentials("alice"))
    return NodeImages(ImageCache(cache, max_bytes=1 << 30), access)


def test_a_node_pulls_once_then_finds_the_image_here(
    registry: TestRegistry, make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ref = str(_push(registry, tmp_path / "layout", "alice/pull-once:1", b"once\n"))
    executor = make_executor(images=_images(registry, tmp_path / "cache"))
    said: list[str] = []
    pulled = executor.pull_image("n0", ref, pulling=lambda: said.append("pulling"))
    assert said == ["pulling"] and pulled > len(b"once\n")
    assert executor.pull_image("n0", ref, pulling=lambda: said.append("again")) == 0
    assert said == ["pulling"]


def test_a_registry_that_went_away_is_waited_for(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    if reason := registry_unavailable():
        pytest.skip(reason)
    with registry_server() as gone:
        ref = str(_push(gone, tmp_path / "layout", "alice/gone:1", b"gone\n"))
        ca_file = Path(shutil.copy(gone.ca_file, tmp_path / "ca.pem"))
        access = RegistryAccess(gone.url, ca_file, gone.credentials("alice"))
    # Stopped: its port answers no more.
    executor = make_executor(
        images=NodeImages(ImageCache(tmp_path / "cache", max_bytes=1 << 30), access)
    )
    with pytest.raises(LaunchDeferred, match=r"waiting to pull image .* cannot be reached"):
        executor.pull_image("n0", ref, pulling=lambda: None)


def test_a_layer_whose_digest_does_not_match_fails_the_launch(
    registry: TestRegistry, make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ref = _push(registry, tmp_path / "layout", "alice/tampered:1", b"tampered\n")
    with registry.client("alice") as client:
        layer = client.image(ref).manifest.layers[-1]
    blob = registry.blob_path(layer.digest)
    shutil.copy(blob, tmp_path / "original")
    try:
        blob.write_bytes(tar_layer([("etc/extra", b"swapped\n")]))
        executor = make_executor(images=_images(registry, tmp_path / "cache"))
        with pytest.raises(LaunchError, match="do not match the digest") as refused:
            executor.pull_image("n0", str(ref), pulling=lambda: None)
        assert not isinstance(refused.value, LaunchDeferred)
    finally:
        shutil.copy(tmp_path / "original", blob)


def test_concurrent_requests_of_one_image_pull_it_once(
    registry: TestRegistry, make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ref = str(_push(registry, tmp_path / "layout", "alice/pull-together:1", b"together\n"))
    executor = make_executor(images=_images(registry, tmp_path / "cache"))
    said: list[str] = []
    with ThreadPoolExecutor(8) as pool:
        pulled = list(
            pool.map(
                lambda _i: executor.pull_image("n0", ref, pulling=lambda: said.append("pulling")),
                range(8),
            )
        )
    assert said == ["pulling"]  # only the request that pulled says so
    assert pulled.count(0) == 7
