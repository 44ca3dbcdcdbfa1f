"""The OpenAPI document, with every error an operation can answer documented.

FastAPI documents a route's success and, for a route with parameters, a 422 in its own shape
(``HTTPValidationError``), which is not what this API sends. :func:`install_openapi` replaces
``app.openapi`` with one that adds, to every operation, the errors it can answer by what it is,
each with the one error body (:class:`gpuyard.models.errors.ErrorBody`), so a new route is
covered without a word in its decorator:

=====  =========================================================================================
422    every operation: validation, and the request guard's checks of every query string
401    every operation but the public ones (:data:`PUBLIC`): no valid API token
403    the same: signed in but not allowed (an admin's action, another user's job)
404    an operation with a path parameter: what it names does not exist
409    every write (not GET): the current state does not allow it, or a guarded write lost a race
413    every POST, PUT and PATCH: the guard refuses a body over the size limit whatever the route
=====  =========================================================================================

A route that declares a status itself keeps its description; an error status it declares
without a body gets the error body. 405 is no operation's (it is the path's, with ``Allow``)
and 500 is a bug, so neither is listed.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from gpuyard.models.errors import ErrorBody
from gpuyard.server.guard import MAX_BODY

__all__ = ["PUBLIC", "error_responses", "install_openapi"]

PUBLIC = frozenset({("get", "/api/v1/health")})
"""Operations that answer without a token (method, path)."""

WRITES = frozenset({"post", "put", "patch", "delete"})
WITH_BODY = frozenset({"post", "put", "patch"})

ERROR_REF = "#/components/schemas/ErrorBody"
DESCRIPTIONS = {
    401: "Not signed in: no valid API token in `Authorization: Bearer …`.",
    403: "Signed in, but not allowed to do this (an admin's action, or another user's job).",
    404: "What the path names does not exist.",
    409: "Valid, but the current state does not allow it; `detail` says why (and `state`, "
    "for a job, which state it is in).",
    413: f"The body is larger than the server takes ({MAX_BODY // (1024 * 1024)} MiB).",
    422: "Invalid: `detail` says what to fix and `errors` where; nothing was changed.",
}
_FASTAPI_VALIDATION = ("HTTPValidationError", "ValidationError")


def error_responses(method: str, path: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses an operation can answer (see the module's table)."""
    statuses = [422]
    if (method, path) not in PUBLIC:
        statuses += [401, 403]
    if any(p.get("in") == "path" for p in operation.get("parameters", ())):
        statuses.append(404)
    if method in WRITES:
        statuses.append(409)
    if method in WITH_BODY:
        statuses.append(413)
    return sorted(statuses)


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the error responses of every operation added (in place)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    body_schema = ErrorBody.model_json_schema(
        ref_template="#/components/schemas/{model}", mode="serialization"
    )
    for name, definition in body_schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components["ErrorBody"] = body_schema
    content = {"application/json": {"schema": {"$ref": ERROR_REF}}}
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status in error_responses(method, path, operation):
                responses.setdefault(str(status), {"description": DESCRIPTIONS[status]})
            for status, response in responses.items():
                if status == "422":  # FastAPI's own, in a shape this API does not send
                    response.update(description=DESCRIPTIONS[422], content=content)
                elif status.isdigit() and 400 <= int(status) < 500:
                    response.setdefault("content", content)
    used = json.dumps(schema["paths"])
    for name in _FASTAPI_VALIDATION:
        if f'"#/components/schemas/{name}"' not in used:
            components.pop(name, None)
    return schema


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (served at ``app.openapi_url``) the document with its errors."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    openapi_version=app.openapi_version,
                    description=app.description,
                    routes=app.routes,
                    tags=app.openapi_tags,
                    servers=app.servers,
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
