"""The node image cache against a real registry: pull once, verify, pin, evict."""

from __future__ import annotations

import itertools
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gpuyard.images.cache import ImageCache
from gpuyard.images.errors import DigestMismatch, ImageTooLarge
from gpuyard.images.registry import RegistryClient
from gpuyard.models.image import ImageRef
from gpuyard.testing.registry import (
    NODE_ARCH,
    OS_RELEASE,
    PushedImage,
    TestRegistry,
    tar_layer,
    write_layout,
)

MB = 1 << 20


class CountingTransport(httpx.HTTPTransport):
    """The real transport, counting the blob downloads it makes."""

    def __init__(self, ca_file: Path) -> None:
        super().__init__(verify=ssl.create_default_context(cafile=str(ca_file)))
        self.blob_gets: list[str] = []
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and "/blobs/" in request.url.path:
            with self._lock:
                self.blob_gets.append(request.url.path)
        return super().handle_request(request)


@pytest.fixture
def counting(registry: TestRegistry) -> Iterator[tuple[RegistryClient, CountingTransport]]:
    transport = CountingTransport(registry.ca_file)
    with registry.client("alice", transport=transport) as client:
        yield client, transport


def push_random(registry: TestRegistry, tmp_path: Path, name: str, size: int) -> ImageRef:
    """An image of one incompressible file of ``size`` bytes."""
    layout = tmp_path / name
    write_layout(layout, [tar_layer([(name, os.urandom(size))])], architecture=NODE_ARCH)
    ref = ImageRef.parse(f"alice/{name}:1")
    with registry.client("alice") as client:
        return ref.pinned(client.push(layout, ref))


def test_pull_builds_the_rootfs_of_every_layer(
    registry: TestRegistry, busybox_image: PushedImage, tmp_path: Path
) -> None:
    cache = ImageCache(tmp_path / "cache", max_bytes=100 * MB)
    with registry.client("alice") as client:
        image = cache.acquire(client, busybox_image.ref, holder="job-1.worker-0")
    assert image.digest == busybox_image.digest
    assert (image.rootfs / "etc/os-release").read_bytes() == OS_RELEASE
    assert (image.rootfs / "etc/motd").read_text() == "hello from the image\n"
    assert os.readlink(image.rootfs / "bin/sh") == "busybox"
    assert image.config.argv(["cat", "/etc/os-release"]) == ["cat", "/etc/os-release"]
    assert cache.get(busybox_image.digest) == image
    if os.geteuid() == 0:  # the unpacked image runs: its busybox, its /etc/os-release
        shown = subprocess.run(
            ["chroot", str(image.rootfs), "/bin/cat", "/etc/os-release"],
            capture_output=True,
            check=True,
        )
        assert shown.stdout == OS_RELEASE
    summary = cache.summary()
    assert (summary.entries, summary.pinned) == (1, 1) and summary.bytes > 1 * MB
    assert list((tmp_path / "cache/tmp").iterdir()) == []


def test_a_hundred_requests_of_one_image_download_it_once(
    counting: tuple[RegistryClient, CountingTransport],
    busybox_image: PushedImage,
    tmp_path: Path,
) -> None:
    client, transport = counting
    cache = ImageCache(tmp_path / "cache", max_bytes=100 * MB)
    with ThreadPoolExecutor(max_workers=100) as pool:
        images = list(
            pool.map(
                lambda n: cache.acquire(client, busybox_image.ref, holder=f"job-{n}"),
                range(100),
            )
        )
    assert {image.rootfs for image in images} == {images[0].rootfs}
    # the config and the two layers, once each
    assert len(transport.blob_gets) == 3 and len(set(transport.blob_gets)) == 3
    assert cache.entries()[0].pins == 100


def test_a_cached_pinned_reference_needs_no_registry(
    registry: TestRegistry, busybox_image: PushedImage, tmp_path: Path
) -> None:
    cache = ImageCache(tmp_path / "cache", max_bytes=100 * MB)
    pinned = busybox_image.ref.pinned(busybox_image.digest)
    with registry.client("alice") as client:
        cache.acquire(client, pinned, holder="a")
    with RegistryClient("https://127.0.0.1:9", ca_file=registry.ca_file) as down:
        assert cache.acquire(down, pinned, holder="b").digest == busybox_image.digest


def test_a_tampered_layer_is_refused_and_leaves_nothing(
    registry: TestRegistry, tmp_path: Path
) -> None:
    ref = push_random(registry, tmp_path, "tamper", 4096)
    cache = ImageCache(tmp_path / "cache", max_bytes=100 * MB)
    with registry.client("alice") as client:
        layer = client.image(ref).manifest.layers[0]
        stored = registry.blob_path(layer.digest)
        data = bytearray(stored.read_bytes())
        data[100] ^= 0xFF
        stored.write_bytes(bytes(data))
        with pytest.raises(DigestMismatch, match=layer.digest):
            cache.acquire(client, ref, holder="a")
    assert cache.summary().entries == 0
    assert list((tmp_path / "cache/tmp").iterdir()) == []
    assert list((tmp_path / "cache/blobs/sha256").iterdir()) == []


def test_eviction_is_least_recently_used_and_skips_pinned_images(
    registry: TestRegistry, tmp_path: Path
) -> None:
    refs = [push_random(registry, tmp_path, name, 100_000) for name in ("lru-a", "lru-b", "lru-c")]
    ticks = itertools.count(1_000_000)
    cache = ImageCache(tmp_path / "cache", max_bytes=700_000, clock=lambda: float(next(ticks)))
    with registry.client("alice") as client:
        cache.acquire(client, refs[0], holder="pinned-job")  # oldest, but pinned
        cache.acquire(client, refs[1], holder="done-job")
        cache.release(str(refs[1].digest), holder="done-job")
        cache.acquire(client, refs[2], holder="new-job")
    kept = {entry.digest for entry in cache.entries()}
    assert kept == {refs[0].digest, refs[2].digest}
    with pytest.raises(KeyError):
        cache.get(str(refs[1].digest))
    assert len(list((tmp_path / "cache/blobs/sha256").iterdir())) == 2  # a's and c's layers
    with registry.client("alice") as client, pytest.raises(ImageTooLarge, match="in use by jobs"):
        cache.acquire(client, refs[1], holder="another-job")  # a and c are both pinned
    cache.release(str(refs[0].digest), holder="pinned-job")
    with registry.client("alice") as client:
        cache.acquire(client, refs[1], holder="another-job")
    assert {entry.digest for entry in cache.entries()} == {refs[1].digest, refs[2].digest}


def test_an_image_larger_than_the_cap_or_the_disk_is_refused_before_downloading(
    registry: TestRegistry,
    counting: tuple[RegistryClient, CountingTransport],
    tmp_path: Path,
) -> None:
    client, transport = counting
    ref = push_random(registry, tmp_path, "big", 200_000)
    small = ImageCache(tmp_path / "small", max_bytes=500_000)
    with pytest.raises(ImageTooLarge, match=r"more than the cache's cap of 500000 bytes"):
        small.acquire(client, ref, holder="a")
    full = ImageCache(tmp_path / "full", max_bytes=1 << 60, min_free_bytes=1 << 59)
    with pytest.raises(ImageTooLarge, match="bytes free"):
        full.acquire(client, ref, holder="a")
    assert [path for path in transport.blob_gets if "/blobs/" in path] == [
        f"/v2/alice/big/blobs/{client.image(ref).manifest.config.digest}"
    ] * 2  # the config only: no layer was downloaded
