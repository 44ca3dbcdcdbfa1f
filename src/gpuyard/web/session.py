"""Signing in to the web UI with a pool token, and keeping forms safe from other sites.

The sign-in form takes an API token (the same ``gy_…`` token ``gpuyard login`` stores) and
makes a session: a token of its own (kind ``session``), a child of the API token (it expires
no later and is revoked with it), that signs in the web UI only, never the API. The cookie
carries the session's token, never the API token; scripts cannot read it (``HttpOnly``) and
the browser sends it only with requests made from the UI's own pages (``SameSite=Strict``);
``Secure`` when the page came over HTTPS. Each request resolves it as the API resolves a
bearer token (:meth:`TokenService.authenticate`), and signing out revokes it, so a copied
cookie signs no one in after sign-out.

State-changing forms carry a CSRF token derived from the session's token (a digest another
site cannot compute), and a POST is refused unless its ``Origin`` (when the browser sends
one) is this server. The REST API does not read the cookie at all: it needs the bearer
header, which another site's page cannot set.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from urllib.parse import parse_qs, urlsplit

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import GpuyardError, PermissionDenied
from gpuyard.models.access import Caller
from gpuyard.models.accounts import TokenKind
from gpuyard.web.context import services

__all__ = [
    "COOKIE",
    "CSRF_FIELD",
    "check_post",
    "csrf_token",
    "read_form",
    "session_token",
    "signed_in",
]

COOKIE = "gpuyard_session"
CSRF_FIELD = "csrf"
MAX_FORM = 512 * 1024


def session_token(request: Request) -> str:
    return request.cookies.get(COOKIE, "")


async def signed_in(request: Request) -> Caller | None:
    """The caller the session cookie signs in, or None (no cookie, a bad or expired token)."""
    token = session_token(request)
    if not token:
        return None
    tokens = services(request).tokens
    header = f"Bearer {token}"
    try:
        caller = tokens.authenticate_cached(header, kind=TokenKind.SESSION)
        if caller is None:
            caller = await run_in_threadpool(
                lambda: tokens.authenticate(header, kind=TokenKind.SESSION)
            )
    except GpuyardError:
        return None
    return caller


def csrf_token(token: str) -> str:
    """What a form of the session of ``token`` must send back."""
    return hashlib.sha256(f"gpuyard-csrf:{token}".encode()).hexdigest()[:40]


async def read_form(request: Request) -> dict[str, list[str]]:
    """The urlencoded body's fields (each with all its values)."""
    body = await request.body()
    if len(body) > MAX_FORM:
        raise PermissionDenied(f"the form is larger than {MAX_FORM // 1024} KiB")
    return parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)


def check_post(
    request: Request, form: Mapping[str, Sequence[str]], *, session: bool = True
) -> None:
    """PermissionDenied unless the POST came from one of this server's pages: its Origin
    (when sent) is this host, and (``session``) it carries the session's CSRF token."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc != host:
            raise PermissionDenied(f"a form of another site ({origin}) cannot act here")
    elif origin == "null":
        raise PermissionDenied("a form of an unknown origin cannot act here")
    if session:
        sent = (form.get(CSRF_FIELD) or [""])[-1]
        token = session_token(request)
        if not token or not hmac.compare_digest(sent, csrf_token(token)):
            raise PermissionDenied(
                "this form has expired or did not come from this site; reload the page and "
                "try again"
            )
