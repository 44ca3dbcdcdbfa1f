"""``/proxy/<job>/…``: the one way to an interactive job's service (docs/interactive.md).

HTTP requests (bodies streamed both ways, the full path kept: the service serves under the
prefix) and WebSockets (a relay both ways) go to the job's service on its node, for the job's
owner only (:meth:`gpuyard.services.interactive.Interactive.target` decides). The caller signs
in with the web UI's session cookie (a browser) or a bearer token (the CLI, scripts).

What the proxy keeps from the service and the service from the person:

- The caller's credentials never reach the service: the ``Authorization`` header and the
  session cookie are taken out; JupyterLab gets its own token (``Authorization: token …``)
  instead, which the browser never holds.
- The service cannot set the pool's session cookie (such a ``Set-Cookie`` is dropped).
- A request signed in by the cookie that another site's page made (its ``Origin`` is not this
  server) is refused, and so is such a WebSocket: the service behind trusts the proxy's
  ``Origin``, which is the service's own.
- A service that does not answer yet is a 503 that says it is starting (with ``Retry-After``),
  never a bare 502.

Each forwarded request marks its job active
(:class:`~gpuyard.services.interactive.Activity`): what idle reclaim reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx
import websockets
from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from gpuyard.errors import GpuyardError, Unauthenticated
from gpuyard.models.accounts import TokenKind
from gpuyard.models.service import ServiceState, ServiceView
from gpuyard.server.deps import JobId
from gpuyard.services.interactive import Activity, ServiceTarget
from gpuyard.web.session import COOKIE

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
DROPPED_ANSWER = HOP_BY_HOP | {"server", "date"}
"""What this server says of itself in its answers, not the service."""
"""Headers of one connection, never forwarded (RFC 9110, 7.6.1); the service gets its own
``Host``."""
NOT_FORWARDED = HOP_BY_HOP | {"authorization", "cookie", "origin", "content-length"}
WS_NOT_FORWARDED = NOT_FORWARDED | {
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
}
RETRY_AFTER = "2"
CONNECT_TIMEOUT = 5.0
HANDSHAKE_TIMEOUT = 120.0
"""Seconds a WebSocket's handshake with the service may take: JupyterLab answers a kernel's
channels only once the kernel has started, which takes more than :data:`CONNECT_TIMEOUT` on
a busy node (a few kernels started at once on two cores take 10 s). An HTTP answer may take
as long as the service needs; this bounds only a handshake that never comes."""
DECODABLE = "gzip, deflate"
"""The encodings asked of a service: those the proxy can decode to take a token out of a page
(the browser's own list may name others)."""
MAX_MESSAGE = 64 * 1024 * 1024
"""Bytes one WebSocket message may carry (a notebook's output can be large)."""


def _activity(connection: HTTPConnection) -> Activity:
    activity: Activity = connection.app.state.services.interactive.activity
    return activity


def _client(connection: HTTPConnection) -> httpx.AsyncClient:
    """One pool of connections to the services (closed with the app)."""
    state = connection.app.state
    if getattr(state, "proxy_client", None) is None:
        state.proxy_client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT), follow_redirects=False
        )
    client: httpx.AsyncClient = state.proxy_client
    return client


# -- who asks -----------------------------------------------------------------------------


async def _caller(connection: HTTPConnection) -> tuple[str, bool]:
    """The caller's name, and whether the session cookie (a browser's ambient credential)
    signed it in rather than a bearer token. Unauthenticated when neither does."""
    tokens = connection.app.state.services.tokens
    authorization = connection.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        caller = tokens.authenticate_cached(authorization)
        if caller is None:
            caller = await run_in_threadpool(tokens.authenticate, authorization)
        return caller.name, False
    cookie = connection.cookies.get(COOKIE, "")
    if not cookie:
        raise Unauthenticated(
            "sign in first: open the pool's web UI and sign in, or send a bearer token"
        )
    header = f"Bearer {cookie}"
    caller = tokens.authenticate_cached(header, kind=TokenKind.SESSION)
    if caller is None:
        caller = await run_in_threadpool(
            lambda: tokens.authenticate(header, kind=TokenKind.SESSION)
        )
    return caller.name, True


def _same_origin(connection: HTTPConnection) -> bool:
    """Whether a request came from this server's own pages (or from no page at all)."""
    origin = connection.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == connection.headers.get("host", "")


async def _target(connection: HTTPConnection, job_id: int) -> ServiceTarget | ServiceView:
    name, by_cookie = await _caller(connection)
    if by_cookie and not _same_origin(connection):
        raise Unauthenticated(
            "a page of another site cannot use your session here: open the service from the "
            "pool's own pages"
        )
    interactive = connection.app.state.services.interactive
    cached: ServiceTarget | None = interactive.target_cached(job_id, actor=name)
    if cached is not None:
        return cached
    found: ServiceTarget | ServiceView = await run_in_threadpool(
        interactive.target, job_id, actor=name
    )
    return found


def _unavailable(view: ServiceView, status: int = 503) -> Response:
    return JSONResponse(
        {"detail": view.detail, "code": "service-" + view.state.value, "state": view.state},
        status_code=status,
        headers={"retry-after": RETRY_AFTER},
    )


def _starting(found: ServiceTarget, exc: Exception) -> ServiceView:
    """The view of a running job whose service did not answer (``exc``)."""
    return ServiceView(
        job_id=found.job_id,
        kind=found.kind,
        state=ServiceState.STARTING,
        path=found.prefix,
        detail=f"the {found.kind.value} is starting: it does not answer yet "
        f"({type(exc).__name__}); try again in a moment",
    )


def _error(exc: GpuyardError) -> Response:
    return JSONResponse({"detail": exc.detail, "code": exc.code}, status_code=exc.status_code)


# -- HTTP ---------------------------------------------------------------------------------


@router.api_route("/proxy/{job_id}", methods=METHODS)
async def bare(job_id: JobId) -> Response:
    """The prefix without its slash: where the service's pages are."""
    return RedirectResponse(f"/proxy/{job_id}/", status_code=307)


@router.api_route("/proxy/{job_id}/{path:path}", methods=METHODS)
async def forward(request: Request, job_id: JobId, path: str) -> Response:
    try:
        found = await _target(request, job_id)
    except GpuyardError as exc:
        return _error(exc)
    if isinstance(found, ServiceView):
        return _unavailable(found)
    _activity(request).touch(job_id, method=request.method)
    url = found.origin + _raw_path(request) + (f"?{request.url.query}" if request.url.query else "")
    headers = _request_headers(request.headers.items(), found, NOT_FORWARDED)
    headers.update(_forwarded(request))
    if "accept-encoding" in headers:
        headers["accept-encoding"] = DECODABLE  # what the proxy can read back to scrub a page
    body = request.stream() if request.method not in ("GET", "HEAD") else None
    client = _client(request)
    outgoing = client.build_request(request.method, url, headers=headers, content=body)
    try:
        upstream = await client.send(outgoing, stream=True)
    except httpx.TransportError as exc:
        return _unavailable(_starting(found, exc))
    if found.token and _is_page(upstream):
        return _scrubbed(upstream, found.token)
    response = StreamingResponse(
        upstream.aiter_raw(),
        status_code=upstream.status_code,
        background=BackgroundTask(upstream.aclose),
    )
    response.raw_headers = [
        (k.lower().encode("latin-1"), v.encode("latin-1"))
        for k, v in _response_headers(upstream.headers.multi_items())
    ]
    return response


def _is_page(upstream: httpx.Response) -> bool:
    return str(upstream.headers.get("content-type", "")).lower().startswith("text/html")


def _raw_path(connection: HTTPConnection) -> str:
    """The path as the caller wrote it, still percent-encoded: decoded, a file named
    ``a?b`` or ``a%2Fb`` would reach the service as another path (or a query)."""
    raw = connection.scope.get("raw_path")
    return raw.decode("latin-1") if raw else connection.url.path


def _scrubbed(upstream: httpx.Response, token: str) -> Response:
    """A page of the service without the service's token in it: JupyterLab writes its token
    into every page's configuration, and the browser is never to hold it (the proxy presents
    it; the page signs in with the cookie the service sets). Streamed (decoded, whatever its
    size), with the last ``len(token) - 1`` bytes held back at each step so that a token split
    between two chunks is found too."""
    kept = [
        (k, v)
        for k, v in _response_headers(upstream.headers.multi_items())
        if k.lower() not in ("content-length", "content-encoding", "etag")
    ]
    response = StreamingResponse(
        _without(upstream.aiter_bytes(), token.encode()),
        status_code=upstream.status_code,
        background=BackgroundTask(upstream.aclose),
    )
    response.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in kept]
    return response


async def _without(chunks: AsyncIterator[bytes], token: bytes) -> AsyncIterator[bytes]:
    keep = len(token) - 1
    tail = b""
    async for chunk in chunks:
        data = (tail + chunk).replace(token, b"")
        tail = data[-keep:] if keep and len(data) > keep else data
        if len(data) > len(tail):
            yield data[: len(data) - len(tail)]
    if tail:
        yield tail


def _request_headers(
    items: Iterable[tuple[str, str]], target: ServiceTarget, dropped: frozenset[str]
) -> dict[str, str]:
    """The caller's headers as the service gets them: no credential of the pool's, the
    service's own token, and the service's own origin (the proxy checked the caller's)."""
    headers = {k: v for k, v in items if k.lower() not in dropped}
    cookies = _cookies_without_session(dict(items).get("cookie", ""))
    if cookies:
        headers["cookie"] = cookies
    headers.update(target.headers())
    headers["origin"] = target.origin
    return headers


def _cookies_without_session(header: str) -> str:
    if not header:
        return ""
    kept = [
        part.strip()
        for part in header.split(";")
        if part.strip() and part.strip().split("=", 1)[0].strip() != COOKIE
    ]
    return "; ".join(kept)


def _forwarded(request: Request) -> dict[str, str]:
    client = request.client.host if request.client else ""
    return {
        "x-forwarded-for": client,
        "x-forwarded-host": request.headers.get("host", ""),
        "x-forwarded-proto": request.url.scheme,
    }


def _response_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The service's headers, less those of its connection and any cookie it sets under the
    pool's session cookie's name."""
    kept = []
    for key, value in items:
        lower = key.lower()
        if lower in DROPPED_ANSWER:
            continue
        if lower == "set-cookie" and _cookie_name(value) == COOKIE:
            continue
        kept.append((key, value))
    return kept


def _cookie_name(set_cookie: str) -> str:
    """The name a browser gives the cookie a ``Set-Cookie`` value sets (RFC 6265, 5.2): what
    comes before the first ``=`` of its first ``;``-separated part, trimmed. Not a strict
    parser's reading: ``http.cookies`` reads no cookie at all in ``gpuyard_session=x;
    Partitioned`` or in a value with a space, which a browser keeps under that name."""
    name, equals, _ = set_cookie.split(";", 1)[0].partition("=")
    return name.strip() if equals else ""


# -- WebSocket ----------------------------------------------------------------------------


@router.websocket("/proxy/{job_id}/{path:path}")
async def relay(websocket: WebSocket, job_id: JobId, path: str) -> None:
    try:
        found = await _target(websocket, job_id)
    except GpuyardError as exc:
        await _refuse(websocket, _error(exc))
        return
    if isinstance(found, ServiceView):
        await _refuse(websocket, _unavailable(found))
        return
    query = websocket.url.query
    url = "ws" + found.origin[len("http") :] + _raw_path(websocket) + (f"?{query}" if query else "")
    headers = _request_headers(websocket.headers.items(), found, WS_NOT_FORWARDED)
    offered = [
        p.strip()
        for p in websocket.headers.get("sec-websocket-protocol", "").split(",")
        if p.strip()
    ]
    origin = headers.pop("origin")
    try:
        upstream = await websockets.connect(
            url,
            additional_headers=headers,
            origin=websockets.Origin(origin),
            subprotocols=[websockets.Subprotocol(p) for p in offered] or None,
            open_timeout=HANDSHAKE_TIMEOUT,
            max_size=MAX_MESSAGE,
            compression=None,
            ping_interval=None,
        )
    except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
        await _refuse(websocket, _unavailable(_starting(found, exc)))
        return
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        with _activity(websocket).connected(job_id):
            await _pump(websocket, upstream)


async def _refuse(websocket: WebSocket, answer: Response) -> None:
    """Refuse a WebSocket's handshake with ``answer``, the status and body the same request
    over HTTP gets. A close before the handshake is accepted would reach the caller as a bare
    403 whatever the reason (the ASGI server answers so), so the denial response is sent where
    the server can; elsewhere, a close with 4000 + the status."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(answer)
        return
    detail = json.loads(bytes(answer.body)).get("detail", "")
    await websocket.close(code=4000 + answer.status_code, reason=detail[:120])


async def _pump(websocket: WebSocket, upstream: Any) -> None:
    """Relay messages both ways until either side closes; then close the other."""

    async def inbound() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            await upstream.send(data if data is not None else message.get("text") or "")

    async def outbound() -> None:
        async for data in upstream:
            if isinstance(data, bytes):
                await websocket.send_bytes(data)
            else:
                await websocket.send_text(data)

    tasks = [asyncio.ensure_future(inbound()), asyncio.ensure_future(outbound())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close()
