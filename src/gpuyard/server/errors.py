"""One place that turns errors into responses: ``{"detail", "code"}``, never a traceback."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gpuyard.errors import GpuyardError

__all__ = ["install_error_handlers", "readable_validation_errors"]

log = logging.getLogger(__name__)


def readable_validation_errors(errors: list[Any]) -> str:
    """One line per problem, e.g. ``resources.gpus: must be >= 0 (got -1)``."""
    lines = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if err.get("type") in ("value_error", "missing") else f" (got {got!r})"
        # A check across fields has no location; its message names the field itself.
        lines.append(f"{'.'.join(loc)}: {msg}{shown}" if loc else f"{msg}{shown}")
    return "; ".join(lines)


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

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return JSONResponse(
            {"detail": "internal server error; see the server log", "code": "internal"},
            status_code=500,
        )
