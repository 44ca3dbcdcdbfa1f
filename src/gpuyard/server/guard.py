"""What every request passes before a route sees it, and what every answer is made of when a
route fails unexpectedly.

:class:`RequestGuard` is a plain ASGI middleware:

- a request body larger than :data:`MAX_BODY` is refused with 413 before it is read whole
  (except on :data:`STREAMED` routes, which stream their body to disk under a cap of their
  own: an image upload);
- requests to an interactive job's service (:data:`PROXIED`) pass unread: their body and
  query are the service's (a notebook saved with its plots is larger than 4 MiB, its outputs
  may hold a NUL), and the proxy streams the body on (server/proxy.py);
- a JSON body is read strictly: no ``NaN``/``Infinity``, no duplicate keys, at most
  :data:`MAX_DEPTH` levels, no string with a NUL character or an unpaired surrogate (neither
  can be stored, passed to a process or printed), no integer outside 64 bits (the databases'
  columns). Each is a 422 naming where in the body it is, e.g. ``command: contains a NUL
  character (\\x00)``, and nothing is stored;
- query strings get the same string checks;
- an exception that no handler turned into an answer becomes a 500 with ``{"detail",
  "code"}`` here, inside the server's own error middleware, so that the connection stays open
  (Starlette's outer handler answers and then closes it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from gpuyard.errors import StorageFull
from gpuyard.store.full import is_storage_full
from gpuyard.web.images import PUSH_PATH

__all__ = ["MAX_BODY", "STREAMED", "RequestGuard", "check_value"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 4 * 1024 * 1024
"""Bytes a request body may have (a batch of 5,000 typical specs is about 1 MiB)."""
STREAMED = frozenset({("POST", "/api/v1/images"), ("POST", PUSH_PATH)})
"""Routes whose body this guard passes on unread: they stream it to disk and cap it
themselves (``GPUYARD_IMAGE_UPLOAD_MAX``): the API's image push and the web UI's."""
PROXIED = "/proxy/"
"""The prefix of the proxy's paths (server/proxy.py), whose bodies and queries are not ours."""
MAX_DEPTH = 32
INT64 = (-(1 << 63), (1 << 63) - 1)
FULL = "the pool's storage is full, so nothing was changed; it works again once space is freed"


Loc = tuple[str | int, ...]
"""Where in a body or query a value is: keys and list indexes, e.g. ``("env", "A")``."""


class BadInput(ValueError):
    def __init__(self, loc: Loc, what: str) -> None:
        where = _where(loc)
        super().__init__(f"{where}: {what}" if where else what)
        self.loc = loc
        self.what = what


def _where(loc: Loc) -> str:
    """``loc`` as the message names it: ``jobs[3].env.A``."""
    where = ""
    for piece in loc:
        where += f"[{piece}]" if isinstance(piece, int) else f".{piece}" if where else piece
    return where


def check_value(value: Any, loc: Loc = (), depth: int = 0) -> None:
    """Raise :class:`BadInput` for what no field of ours can hold (see the module)."""
    if isinstance(value, str):
        _check_text(value, loc)
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if not INT64[0] <= value <= INT64[1]:
            raise BadInput(loc, f"{value} is out of range (integers are 64-bit)")
    elif isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise BadInput(loc, f"nested deeper than {MAX_DEPTH} levels")
        for key, item in value.items():
            _check_text(key, loc)
            check_value(item, (*loc, key), depth + 1)
    elif isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise BadInput(loc, f"nested deeper than {MAX_DEPTH} levels")
        for i, item in enumerate(value):
            check_value(item, (*loc, i), depth + 1)


def _check_text(text: str, loc: Loc) -> None:
    if "\x00" in text:
        raise BadInput(loc, "contains a NUL character (\\x00); remove it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise BadInput(
            loc, f"contains an unpaired surrogate ({bad!r}): not valid Unicode text"
        ) from None


def _no_constant(name: str) -> Any:
    raise BadInput((), f"{name} is not a number JSON allows; give a finite number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise BadInput((key,), "given twice in one object; keep one")
        found[key] = value
    return found


def parse_strict(body: bytes) -> Any:
    """The JSON ``body``, read strictly, or :class:`BadInput`."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput((), f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise BadInput((), f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise BadInput((), f"the body is not valid JSON: {exc.msg} at position {exc.pos}") from None
    check_value(value)
    return value


class RequestGuard:
    def __init__(self, app: App, *, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        passed = scope.get("path", "").startswith(PROXIED)
        try:
            refused = None if passed else self._check_query(scope)
            streamed = passed or (scope["method"], scope.get("path")) in STREAMED
            if refused is None and scope["method"] in ("POST", "PUT", "PATCH") and not streamed:
                refused, receive = await self._check_body(scope, receive)
            if refused is not None:
                await _answer(send, *refused)
                return
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if is_storage_full(exc):  # a file write outside the store: the same clear answer
                path = scope.get("path")
                log.error("%s %s: the disk is full: %s", scope.get("method"), path, exc)
                if not started:
                    await _answer(send, 503, FULL, StorageFull.code)
                return
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if not started:  # else the answer is under way: nothing more can be said
                await _answer(send, 500, "internal server error; see the server log", "internal")

    @staticmethod
    def _check_query(scope: Scope) -> Refusal | None:
        raw = scope.get("query_string", b"")
        if not raw:
            return None
        try:
            pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True, errors="strict")
            for key, value in pairs:
                _check_text(value, (key,))
        except BadInput as exc:
            return 422, str(exc), "invalid_spec", _errors("query", exc)
        except (UnicodeDecodeError, ValueError):
            return 422, "the query string is not valid UTF-8 percent-encoding", "invalid_spec"
        return None

    async def _check_body(self, scope: Scope, receive: Receive) -> tuple[Refusal | None, Receive]:
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            return _too_large(declared, self.max_body), receive
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, _replay(b"", receive, read=True)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return _too_large(size, self.max_body), receive
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and _is_json(scope):
            try:
                parse_strict(body)
            except BadInput as exc:
                return (422, str(exc), "invalid_spec", _errors("body", exc)), receive
        return None, _replay(body, receive)


def _replay(body: bytes, original: Receive, *, read: bool = False) -> Receive:
    """A ``receive`` that gives the body already read, then passes on to the real one (which
    says when the client goes away)."""
    given = read

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await original()

    return receive


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return b"json" in value.lower()
    return True  # no type given: FastAPI reads a body as JSON


def _too_large(size: int, limit: int) -> tuple[int, str, str]:
    return (
        413,
        f"the request body is {size} bytes; the limit is {limit} bytes "
        f"({limit // (1024 * 1024)} MiB): send fewer jobs per request",
        "too_large",
    )


Refusal = tuple[int, str, str] | tuple[int, str, str, list[dict[str, Any]]]


def _errors(part: str, exc: BadInput) -> list[dict[str, Any]]:
    """The ``errors`` list of a 422, shaped as the validation errors of the routes are."""
    return [{"loc": [part, *exc.loc], "msg": exc.what}]


async def _answer(
    send: Send, status: int, detail: str, code: str, errors: list[dict[str, Any]] | None = None
) -> None:
    content: dict[str, Any] = {"detail": detail, "code": code}
    if errors is not None:
        content["errors"] = errors
    body = json.dumps(content).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
