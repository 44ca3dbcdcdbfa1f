"""One place that turns errors into responses: ``{"detail", "code"}``, never a traceback."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gpuyard.errors import GpuyardError
from gpuyard.models.validation import readable_validation_errors

__all__ = ["install_error_handlers"]

log = logging.getLogger(__name__)


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

    # Anything else is answered 500 by server.guard.RequestGuard, which keeps the connection.
