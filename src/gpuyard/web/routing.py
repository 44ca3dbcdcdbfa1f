"""How web routes answer: a signed-in caller or a redirect to the sign-in page, and errors
as HTML pages (the API's handlers answer JSON)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute

from gpuyard.errors import GpuyardError, InvalidSpec
from gpuyard.models.access import Caller
from gpuyard.models.validation import readable_validation_errors
from gpuyard.web.render import page
from gpuyard.web.session import signed_in

__all__ = ["CallerDep", "SignInNeeded", "WebRoute", "back_to"]


class SignInNeeded(Exception):
    """Raised by :data:`CallerDep` when nobody is signed in: the route answers a redirect."""


async def _caller(request: Request) -> Caller:
    caller = await signed_in(request)
    if caller is None:
        raise SignInNeeded
    return caller


CallerDep = Annotated[Caller, Depends(_caller)]


def back_to(path: str, notice: str = "") -> RedirectResponse:
    """A 303 to ``path`` (after a POST), with a notice to show there."""
    if notice:
        path += ("&" if "?" in path else "?") + "notice=" + quote(notice[:400])
    return RedirectResponse(path, status_code=303)


class WebRoute(APIRoute):
    """A route whose errors are pages: a typed error with its status and message, a missing
    sign-in as a redirect to ``/login``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await original(request)
            except SignInNeeded:
                target = request.url.path
                if request.url.query:
                    target += "?" + request.url.query
                if request.method != "GET":
                    target = "/"
                return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
            except GpuyardError as exc:
                return await _error(request, exc.status_code, exc.detail, exc.code)
            except RequestValidationError as exc:  # a bad query or path value
                detail = readable_validation_errors(list(exc.errors()))
                return await _error(request, 422, detail, InvalidSpec.code)

        return handler


async def _error(request: Request, status: int, detail: str, code: str) -> Response:
    caller = await signed_in(request)
    return page(
        request, "error.html", caller, status_code=status, detail=detail, code=code, title="Error"
    )
