"""How the pool reaches its image registry: the URL, the CA and the pool's own credentials
(docs/images.md), shared by the submission (which pins tags to digests) and the nodes (which
pull)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from gpuyard.images.errors import ImageError
from gpuyard.images.registry import Credentials, RegistryClient
from gpuyard.models.image import ImageRef

__all__ = ["RegistryAccess"]


@dataclass(frozen=True)
class RegistryAccess:
    """The pool's registry; :meth:`client` opens a connection to it."""

    url: str
    ca_file: Path | None = None
    credentials: Credentials | None = None

    @classmethod
    def of(
        cls, url: str | None, ca_file: Path | None, user: str | None, password: str | None
    ) -> RegistryAccess | None:
        """The access the pool's settings describe; None without a registry URL."""
        if not url:
            return None
        credentials = Credentials(user, password or "") if user else None
        return cls(url.rstrip("/"), ca_file, credentials)

    @property
    def host(self) -> str:
        return httpx.URL(self.url).netloc.decode()

    def client(self) -> RegistryClient:
        return RegistryClient(self.url, credentials=self.credentials, ca_file=self.ca_file)

    def check_own(self, ref: ImageRef) -> None:
        """Refuse an image of another registry: the pool pulls from its own only (for now)."""
        if ref.registry is not None and ref.registry != self.host:
            raise ImageError(
                f"image {ref} is in registry {ref.registry}; this pool pulls only from its own "
                f"({self.host}): push the image there, or name it without a registry host"
            )
