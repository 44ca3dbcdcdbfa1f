"""The node image cache: verified blobs and one unpacked root filesystem per image.

Layout under the cache directory (docs/images.md#the-node-image-cache)::

    blobs/sha256/<hex>             layers and configs, content-addressed, verified on download
    images/<hex>/rootfs/           the image's layers applied in order (images/unpack.py)
    images/<hex>/meta.json         its reference, config, layers and size in bytes
    images/<hex>/used              its mtime is the last time a job asked for it (LRU)
    pins/<hex>/<holder>            one file per holder (a job's workers) using the image
    locks/<hex>.lock, cache.lock   flock(2) locks: one pull per image; pins against eviction
    tmp/                           builds in progress, renamed into images/ when whole

An image is built in ``tmp/`` and renamed into place, so a crash never leaves half a rootfs.
Concurrent requests of one image (threads or processes) take the image's lock: the first
pulls, the others find it built. Pinned images are never evicted; the others go least
recently used first when a pull needs room under the size cap. A pull that cannot fit the cap
or the free disk fails before downloading, naming the sizes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuyard.images.errors import ImageTooLarge
from gpuyard.images.registry import RegistryClient, ResolvedImage
from gpuyard.images.unpack import unpack_layer
from gpuyard.models.image import DIGEST_PATTERN, Descriptor, ImageConfig, ImageRef

__all__ = ["CacheEntry", "CacheSummary", "CachedImage", "ImageCache"]

UNPACK_FACTOR = 3
"""How much larger than its compressed layers an image is assumed to unpack, for the check
before pulling; the unpack itself is capped by what the size cap leaves."""
_HOLDER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


@dataclass(frozen=True, slots=True)
class CachedImage:
    """An image ready on this node: where its rootfs is and how to run it."""

    digest: str
    rootfs: Path
    config: ImageConfig


@dataclass(frozen=True, slots=True)
class CacheEntry:
    digest: str
    bytes: int
    last_used: float
    pins: int


@dataclass(frozen=True, slots=True)
class CacheSummary:
    entries: int
    bytes: int
    pinned: int


def _hex(digest: str) -> str:
    if not DIGEST_PATTERN.fullmatch(digest):
        raise ValueError(f"{digest!r} is not a sha256 digest")
    return digest.removeprefix("sha256:")


def _tree_bytes(path: Path) -> int:
    total = 0
    for directory, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class ImageCache:
    """One node's image cache; see the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int,
        min_free_bytes: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.min_free_bytes = min_free_bytes
        self.clock = clock
        for sub in ("blobs/sha256", "images", "pins", "locks", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        # A job's runtime may open its rootfs as the job's own user: images/ can be passed
        # through (not listed); the rest of the cache is the node's only.
        (root / "images").chmod(0o711)
        self._clear_abandoned_builds()

    # -- getting an image ------------------------------------------------------------------

    def acquire(
        self,
        client: RegistryClient,
        ref: ImageRef,
        *,
        holder: str,
        pulling: Callable[[], None] = lambda: None,
    ) -> CachedImage:
        """The image ``ref`` names, pulled if missing, pinned for ``holder`` until
        ``release``. A pinned reference found in the cache needs no registry at all.
        ``pulling`` is called by the one request that pulls it, before it downloads (the
        others wait for that pull and find the image built)."""
        _holder(holder)
        resolved: ResolvedImage | None = None
        if ref.digest and self._built(ref.digest):
            digest = ref.digest
        else:
            resolved = client.image(ref)
            digest = resolved.digest
        with _flock(self.root / "locks" / f"{_hex(digest)}.lock"):
            if not self._pin_if_built(digest, holder):
                pinned = ref.pinned(digest)
                pulling()
                self._pull(client, pinned, resolved or client.image(pinned))
                if not self._pin_if_built(digest, holder):
                    raise ImageTooLarge(
                        f"image {ref} was evicted as soon as it was pulled: the cache's cap "
                        f"({self.max_bytes} bytes) is too small for the images in use"
                    )
        return self.get(digest)

    def get(self, digest: str) -> CachedImage:
        """A built image, by manifest digest (``KeyError`` if not in the cache)."""
        directory = self._image_dir(digest)
        try:
            meta = json.loads((directory / "meta.json").read_text())
        except FileNotFoundError:
            raise KeyError(digest) from None
        return CachedImage(digest, directory / "rootfs", ImageConfig.from_json(meta["config"]))

    def holds(self, ref: ImageRef) -> bool:
        """Whether the image a pinned ``ref`` names is built here (a tag alone: False, as
        only the registry can say which image it names now)."""
        return ref.digest is not None and self._built(ref.digest)

    def image_bytes(self, digest: str) -> int:
        """The bytes a built image's root filesystem takes (``KeyError`` if not here)."""
        try:
            meta = json.loads((self._image_dir(digest) / "meta.json").read_text())
        except FileNotFoundError:
            raise KeyError(digest) from None
        return int(meta["bytes"])

    def release(self, digest: str, *, holder: str) -> None:
        """Drop ``holder``'s pin; the image stays cached, evictable once no pin is left."""
        with self._cache_lock():
            (self._pins_dir(digest) / _holder(holder)).unlink(missing_ok=True)

    # -- pulling ---------------------------------------------------------------------------

    def _pull(self, client: RegistryClient, ref: ImageRef, image: ResolvedImage) -> None:
        config = client.config(ref, image.manifest)
        build = self._scratch("build")
        try:
            (build / "rootfs").mkdir(parents=True)
            allowance = self._make_room(image, build)
            for layer in image.manifest.layers:
                blob = self._fetch_blob(client, ref, layer)
                allowance -= unpack_layer(blob, build / "rootfs", max_bytes=allowance).bytes
            meta = {
                "ref": str(ref),
                "config": config.to_json(),
                "layers": [layer.digest for layer in image.manifest.layers],
                "bytes": _tree_bytes(build / "rootfs"),
            }
            (build / "meta.json").write_text(json.dumps(meta))
            self._stamp(build)
            os.rename(build, self._image_dir(image.digest))
        finally:
            shutil.rmtree(build, ignore_errors=True)

    def _fetch_blob(self, client: RegistryClient, ref: ImageRef, layer: Descriptor) -> Path:
        path = self.root / "blobs/sha256" / _hex(layer.digest)
        if not path.exists():
            partial = self._scratch("blob")
            client.blob(ref, layer, partial)
            os.replace(partial, path)  # content-addressed: a concurrent writer wrote the same
        return path

    def _make_room(self, image: ResolvedImage, build: Path) -> int:
        """Evict unpinned images until this one's estimate fits; the bytes it may unpack.
        The build's layers are recorded first, so no eviction drops them while it runs."""
        layers = image.manifest.layers
        download = sum(
            layer.size
            for layer in layers
            if not (self.root / "blobs/sha256" / _hex(layer.digest)).exists()
        )
        unpacked = UNPACK_FACTOR * sum(layer.size for layer in layers)
        needed = download + unpacked
        if needed > self.max_bytes:
            raise ImageTooLarge(
                f"image {image.digest} needs about {needed} bytes ({download} to download, "
                f"{unpacked} unpacked), more than the cache's cap of {self.max_bytes} bytes"
            )
        with self._cache_lock():
            layer_list = [layer.digest for layer in layers]
            (build / "layers.json").write_text(json.dumps(layer_list))
            self._evict_until(self.max_bytes - needed)
            sizes = f"about {needed} bytes ({download} to download, {unpacked} unpacked)"
            self._check_fits(f"image {image.digest} needs {sizes}", needed)
            return self.max_bytes - self._used_bytes() - download

    def _check_fits(self, needs: str, needed: int) -> None:
        used = self._used_bytes()
        if used + needed > self.max_bytes:
            raise ImageTooLarge(
                f"{needs} but images in use by jobs hold {used} of the cache's "
                f"{self.max_bytes} bytes; it fits once their jobs end, or raise the cap"
            )
        free = shutil.disk_usage(self.root).free - self.min_free_bytes
        if needed > free:
            raise ImageTooLarge(
                f"{needs} but the cache's disk has {max(free, 0)} bytes free "
                f"(keeping {self.min_free_bytes} in reserve)"
            )

    # -- eviction --------------------------------------------------------------------------

    def _evict_until(self, target: int) -> None:
        """Delete unpinned images, least recently used first, until at most ``target`` bytes
        are used (or only pinned images are left); then blobs no image uses."""
        for entry in sorted(self.entries(), key=lambda e: e.last_used):
            if self._used_bytes() <= target:
                break
            if entry.pins == 0:
                self._delete(entry.digest)
        self._drop_unused_blobs()

    def _delete(self, digest: str) -> None:
        doomed = self._scratch("evicted")
        os.rename(self._image_dir(digest), doomed)  # gone from images/ at once, then deleted
        shutil.rmtree(doomed, ignore_errors=True)

    def _drop_unused_blobs(self) -> None:
        """Delete the blobs that neither a built image nor a build in progress uses."""
        used = set()
        for directory in (self.root / "images").iterdir():
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
                used.update(json.loads((directory / "meta.json").read_text())["layers"])
        for build in (self.root / "tmp").glob("*.build.*"):
            with contextlib.suppress(FileNotFoundError, ValueError):
                used.update(json.loads((build / "layers.json").read_text()))
        for blob in (self.root / "blobs/sha256").iterdir():
            if f"sha256:{blob.name}" not in used:
                blob.unlink(missing_ok=True)

    # -- inspection ------------------------------------------------------------------------

    def entries(self) -> list[CacheEntry]:
        found = []
        for directory in (self.root / "images").iterdir():
            digest = f"sha256:{directory.name}"
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
                meta = json.loads((directory / "meta.json").read_text())
                pins = self._pins_dir(digest)
                found.append(
                    CacheEntry(
                        digest=digest,
                        bytes=int(meta["bytes"]),
                        last_used=(directory / "used").stat().st_mtime,
                        pins=len(list(pins.iterdir())) if pins.exists() else 0,
                    )
                )
        return found

    def summary(self) -> CacheSummary:
        entries = self.entries()
        return CacheSummary(
            entries=len(entries),
            bytes=self._used_bytes(),
            pinned=sum(1 for entry in entries if entry.pins),
        )

    def _used_bytes(self) -> int:
        blobs = sum(blob.stat().st_size for blob in (self.root / "blobs/sha256").iterdir())
        return blobs + sum(entry.bytes for entry in self.entries())

    # -- small parts -----------------------------------------------------------------------

    def _image_dir(self, digest: str) -> Path:
        return self.root / "images" / _hex(digest)

    def _pins_dir(self, digest: str) -> Path:
        return self.root / "pins" / _hex(digest)

    def _built(self, digest: str) -> bool:
        return (self._image_dir(digest) / "meta.json").exists()

    def _pin_if_built(self, digest: str, holder: str) -> bool:
        """Pin and mark used, under the cache lock so no eviction runs in between."""
        with self._cache_lock():
            if not self._built(digest):
                return False
            pins = self._pins_dir(digest)
            pins.mkdir(exist_ok=True)
            (pins / _holder(holder)).touch()
            self._stamp(self._image_dir(digest))
            return True

    def _stamp(self, directory: Path) -> None:
        used = directory / "used"
        used.touch()
        now = self.clock()
        os.utime(used, (now, now))

    def _scratch(self, kind: str) -> Path:
        """A fresh path in tmp/, named after this process so a restart can clear it."""
        return self.root / "tmp" / f"{os.getpid()}.{kind}.{uuid.uuid4().hex}"

    def _cache_lock(self) -> contextlib.AbstractContextManager[None]:
        return _flock(self.root / "locks" / "cache.lock")

    def _clear_abandoned_builds(self) -> None:
        for leftover in (self.root / "tmp").iterdir():
            pid = leftover.name.split(".")[0]
            if pid.isdigit() and len(pid) < 10 and _alive(int(pid)):
                continue  # another process is building it now
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


def _holder(holder: str) -> str:
    if not holder or len(holder) > 200 or not set(holder) <= _HOLDER_CHARS or holder[0] == ".":
        raise ValueError(f"pin holder {holder!r}: use letters, digits, '-', '_' and '.'")
    return holder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
