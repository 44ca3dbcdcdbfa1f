"""The typed errors of pulling and unpacking images; every message says what to fix.

No message carries a credential: the registry client names the registry, the repository and
the digest, never a user name's password or a token (docs/images.md#the-registry-client).
"""

from __future__ import annotations

from typing import ClassVar

from gpuyard.errors import GpuyardError, InvalidSpec, NotFound, PermissionDenied

__all__ = [
    "DigestMismatch",
    "ImageError",
    "ImageNotFound",
    "ImageTooLarge",
    "RegistryUnavailable",
    "Unauthorized",
    "UnsafeLayer",
    "UnsupportedLayer",
    "WrongArchitecture",
]


class ImageError(GpuyardError):
    """Root of the image errors."""

    status_code: ClassVar[int] = 502
    code: ClassVar[str] = "image_error"


class ImageNotFound(NotFound, ImageError):
    """The registry has no such repository, tag or digest."""


class Unauthorized(PermissionDenied, ImageError):
    """The registry refused the credentials given, or asked for some and none were given."""


class WrongArchitecture(InvalidSpec, ImageError):
    """The image has no variant for this node's OS and CPU architecture."""


class RegistryUnavailable(ImageError):
    """The registry could not be reached or answered with a server error."""

    status_code = 503
    code = "registry_unavailable"


class DigestMismatch(ImageError):
    """Downloaded bytes whose sha256 is not the digest the manifest names."""

    code = "digest_mismatch"


class UnsafeLayer(ImageError):
    """A layer that tries to reach outside its root filesystem (``..`` paths and the like)."""

    status_code = 422
    code = "unsafe_layer"


class UnsupportedLayer(ImageError):
    """A layer in a format this node cannot read (zstd without a library for it)."""

    status_code = 422
    code = "unsupported_layer"


class ImageTooLarge(ImageError):
    """The image does not fit the cache's free disk or its size cap."""

    status_code = 507
    code = "image_too_large"
