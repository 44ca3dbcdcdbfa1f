"""One error hierarchy for the server, the client and the CLI.

The server maps each class to an HTTP status and a stable ``code``; the client maps the code
back to the same class, so `except gpuyard.errors.NotFound` works on both sides of the wire.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "Conflict",
    "GpuyardError",
    "IllegalTransition",
    "InvalidSpec",
    "NotFound",
    "PermissionDenied",
    "ServerUnavailable",
    "StaleWrite",
    "StorageFull",
    "TooLarge",
    "Unauthenticated",
    "error_for_code",
]


class GpuyardError(Exception):
    """Root of every error gpuyard raises on purpose."""

    status_code: ClassVar[int] = 500
    code: ClassVar[str] = "internal"

    def __init__(self, detail: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra or {}

    def to_body(self) -> dict[str, Any]:
        return {"detail": self.detail, "code": self.code, **self.extra}


class NotFound(GpuyardError):
    status_code = 404
    code = "not_found"


class Conflict(GpuyardError):
    """The request is valid but the entity's current state does not allow it."""

    status_code = 409
    code = "conflict"


class IllegalTransition(Conflict):
    """A state change that the transition table does not allow."""

    code = "illegal_transition"


class StaleWrite(Conflict):
    """A guarded write found the row changed since it was read; the decision is dropped."""

    code = "stale_write"


class PermissionDenied(GpuyardError):
    status_code = 403
    code = "permission_denied"


class Unauthenticated(GpuyardError):
    """No valid API token came with the request; the message says how to get one."""

    status_code = 401
    code = "unauthenticated"


class InvalidSpec(GpuyardError):
    """Input that cannot be accepted; the message says what to change."""

    status_code = 422
    code = "invalid_spec"


class TooLarge(GpuyardError):
    """A request larger than the server takes; the message gives the limit."""

    status_code = 413
    code = "too_large"


class ServerUnavailable(GpuyardError):
    """The client could not reach a gpuyard server."""

    status_code = 503
    code = "unavailable"


class StorageFull(GpuyardError):
    """The pool's disk (or its database's) is full: nothing was changed. It passes once space
    is freed (docs/security.md#logs-and-disk-space)."""

    status_code = 503
    code = "storage_full"


_BY_CODE: dict[str, type[GpuyardError]] = {
    cls.code: cls
    for cls in (
        GpuyardError,
        NotFound,
        Conflict,
        IllegalTransition,
        StaleWrite,
        PermissionDenied,
        Unauthenticated,
        InvalidSpec,
        TooLarge,
        ServerUnavailable,
        StorageFull,
    )
}


def error_for_code(code: str) -> type[GpuyardError]:
    """The error class for a wire ``code``; unknown codes map to the root class."""
    return _BY_CODE.get(code, GpuyardError)
