"""One place that turns errors into responses: ``{"detail", "code"}``, never a traceback.

Every body is a :class:`gpuyard.models.errors.ErrorBody`, whichever part answers: a service's
typed error, a request that fails validation, or the router's own refusals (a path that does
not exist, a method the path does not have).
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import Match

from gpuyard.errors import (
    GpuyardError,
    InvalidSpec,
    NotFound,
    PermissionDenied,
    TooLarge,
    Unauthenticated,
)
from gpuyard.models.validation import readable_validation_errors

__all__ = ["allowed_methods", "install_error_handlers", "slash_redirect"]

log = logging.getLogger(__name__)

METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_CODES = {
    400: "bad_request",
    401: Unauthenticated.code,
    403: PermissionDenied.code,
    404: NotFound.code,
    405: "method_not_allowed",
    413: TooLarge.code,
    422: InvalidSpec.code,
}


def allowed_methods(app: Any, scope: MutableMapping[str, Any]) -> list[str]:
    """The methods that some route of ``app`` serves at the request's path. FastAPI makes a
    route per method, so the router's own 405 names only one route's methods; asking every
    route whether it would take the path with each method finds them all, included routers
    and all."""
    return [
        method
        for method in METHOD_ORDER
        if any(
            route.matches({**scope, "method": method})[0] is Match.FULL
            for route in app.router.routes
        )
    ]


def slash_redirect(app: Any, scope: MutableMapping[str, Any]) -> str | None:
    """Where a path that no route takes should go: the same path with its trailing slash
    removed (or added) when some route takes that, as a path (never a host), with the
    query; None when no route takes either."""
    path: str = scope["path"]
    if scope["type"] != "http" or path == "/":
        return None
    other = path.rstrip("/") if path.endswith("/") else path + "/"
    if not other or not any(
        route.matches({**scope, "path": other})[0] is not Match.NONE for route in app.router.routes
    ):
        return None
    # "//host" would be a URL of another host to the client: one leading slash only.
    location = "/" + other.lstrip("/\\")
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{location}?{query}" if query else location


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GpuyardError)
    async def _gpuyard_error(_request: Request, exc: GpuyardError) -> JSONResponse:
        return JSONResponse(exc.to_body(), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        body = {
            "detail": readable_validation_errors(errors),
            "code": "invalid_spec",
            "errors": [
                {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in errors
            ],
        }
        return JSONResponse(body, status_code=422)

    # Starlette's own redirect of a path with (or without) a trailing slash writes an absolute
    # URL built from the request's Host header: a forged Host sends the client to another
    # site. The 404 below redirects with a path instead, relative to wherever it was asked.
    app.router.redirect_slashes = False

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 404 and (location := slash_redirect(request.app, request.scope)):
            return RedirectResponse(location, status_code=307)
        headers = dict(exc.headers or {})
        method, path = request.method, request.url.path
        if exc.status_code == 405:
            allowed = allowed_methods(request.app, request.scope)
            headers["Allow"] = ", ".join(allowed)
            detail = f"{path} has no {method}; it has {', '.join(allowed)}"
        elif exc.status_code == 404 and exc.detail == "Not Found":
            detail = f"no such path: {path} (the API is under /api/v1; see /api/docs)"
        else:
            detail = str(exc.detail)
        code = _CODES.get(exc.status_code, f"http_{exc.status_code}")
        return JSONResponse(
            {"detail": detail, "code": code}, status_code=exc.status_code, headers=headers
        )

    # Anything else is answered 500 by server.guard.RequestGuard, which keeps the connection.
