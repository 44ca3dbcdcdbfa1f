"""The images this node's workers run in (docs/images.md, "Jobs in images"): the node's image
cache, filled from the pool's registry, and what a worker in an image is given.

An image is pulled once per node and pinned by each worker that runs in it (the pin is its
key), so a running worker's image is never evicted; the pin goes when the worker has ended.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpuyard.executors.local.container import DEFAULT_PATH
from gpuyard.images.access import RegistryAccess
from gpuyard.images.cache import CachedImage, ImageCache
from gpuyard.images.registry import RegistryClient
from gpuyard.models.cdi import CDI_DIRS, CdiError, CdiSpec, parse_cdi
from gpuyard.models.image import ImageRef
from gpuyard.models.worker import IMAGE_LIBRARY, WorkerKey

__all__ = [
    "DEFAULT_SHM",
    "LIBRARY_PACKAGE",
    "ImagesConfig",
    "NodeImages",
    "holder",
    "image_env",
    "load_cdi",
    "shm_size",
]

log = logging.getLogger(__name__)

LIBRARY_PACKAGE = f"{IMAGE_LIBRARY}/gpuyard"
"""Where the pool's own package is mounted in a worker's image."""

DEFAULT_SHM = 1 << 30
"""A worker's /dev/shm in an image when its job names no size and it has no memory limit."""
MIN_SHM = 64 << 20


def holder(key: WorkerKey) -> str:
    """The name a worker pins its image under."""
    return f"{key.job_id}-{key.attempt}-{key.rank}"


def image_env(config_env: dict[str, str], path: Sequence[str]) -> dict[str, str]:
    """The environment a worker starts from in an image (the job's goes on top): the image's
    ``Env``, with gpuyard's own directories ``path`` before its ``PATH`` (the default one when
    it has none) and the pool's package first on ``PYTHONPATH``, so ``import gpuyard.runtime``
    works in the image. A job that sets either variable itself replaces the whole
    (docs/images.md, "Launch modes in an image")."""
    env = dict(config_env)
    own = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{IMAGE_LIBRARY}:{own}" if own else IMAGE_LIBRARY
    if path:
        env["PATH"] = ":".join([*path, env.get("PATH") or DEFAULT_PATH])
    return env


def shm_size(asked: int, memory_limit: int) -> int:
    """The worker's /dev/shm: what its job asked, else half of its memory limit (its pages
    count in that limit), else :data:`DEFAULT_SHM`."""
    if asked:
        return asked
    return max(MIN_SHM, memory_limit // 2) if memory_limit else DEFAULT_SHM


@dataclass
class NodeImages:
    """This node's cache and the registry it pulls from."""

    cache: ImageCache
    access: RegistryAccess
    driver: CdiSpec | None = None
    """The host's GPU driver as its CDI spec lists it (None: no spec on this node)."""

    def __post_init__(self) -> None:
        self._client: RegistryClient | None = None
        self._lock = threading.Lock()

    def acquire(self, ref: str, key: WorkerKey) -> CachedImage:
        """The image ``ref`` names, pulled if this node lacks it, pinned for worker ``key``
        (a pinned reference already here asks the registry nothing)."""
        return self.cache.acquire(self._registry(), ImageRef.parse(ref), holder=holder(key))

    def pull(self, ref: str, *, pulling: Callable[[], None]) -> int:
        """Have the image ``ref`` names here before any worker asks for it; the bytes it
        takes once pulled, or 0 when this call did not pull it (it was here, or another
        request pulled it meanwhile). ``pulling`` is called first by the request that pulls.
        Pinned only while it is pulled: the workers pin it themselves."""
        parsed = ImageRef.parse(ref)
        if self.cache.holds(parsed):
            return 0
        pulled = False

        def started() -> None:
            nonlocal pulled
            pulled = True
            pulling()

        holder = f"pull-{uuid.uuid4().hex}"
        cached = self.cache.acquire(self._registry(), parsed, holder=holder, pulling=started)
        try:
            return self.cache.image_bytes(cached.digest) if pulled else 0
        finally:
            self.cache.release(cached.digest, holder=holder)

    def release(self, digest: str, key: WorkerKey) -> None:
        self.cache.release(digest, holder=holder(key))

    def _registry(self) -> RegistryClient:
        with self._lock:  # one connection pool, made when first needed (TLS set-up costs)
            if self._client is None:
                self._client = self.access.client()
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


@dataclass(frozen=True)
class ImagesConfig:
    """What a node needs to pull and run jobs' images, as the pool's settings give it: built
    into a :class:`NodeImages` by the pool for its own machine, and handed to each Ray node's
    agent with the calls that need it (the agents may outlive a pool, or serve another)."""

    url: str
    ca_pem: str | None = None
    """The registry's CA certificate (PEM text: the agents' machines lack the pool's file)."""
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    cache_max: int = 100 << 30
    cdi_dirs: tuple[str, ...] = CDI_DIRS

    def node_images(self, home: Path) -> NodeImages:
        """This node's images under ``home`` (the cache at ``home/images``)."""
        ca_file = None
        if self.ca_pem:
            ca_file = home / "registry-ca.pem"
            if not ca_file.exists() or ca_file.read_text() != self.ca_pem:
                home.mkdir(parents=True, exist_ok=True)
                ca_file.write_text(self.ca_pem)
        access = RegistryAccess.of(self.url, ca_file, self.user, self.password)
        assert access is not None  # a config has a URL
        cache = ImageCache(home / "images", max_bytes=self.cache_max)
        return NodeImages(cache, access, driver=load_cdi(self.cdi_dirs))


def load_cdi(directories: Sequence[str] = CDI_DIRS) -> CdiSpec | None:
    """The first CDI spec of NVIDIA GPUs in ``directories`` (files in name order); a spec that
    cannot be read is logged and skipped."""
    for directory in directories:
        folder = Path(directory)
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                return parse_cdi(yaml.safe_load(path.read_text()))
            except (OSError, yaml.YAMLError, CdiError) as exc:
                log.warning("CDI spec %s not used: %s", path, exc)
    return None
