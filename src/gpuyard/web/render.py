"""Templates: one Jinja2 environment, autoescaping everything, with the filters pages use."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from gpuyard import __version__
from gpuyard.models.access import Caller
from gpuyard.quantities import format_bytes, format_duration
from gpuyard.web.session import CSRF_FIELD, csrf_token, session_token

__all__ = ["page"]


def _when(value: datetime | float | None) -> str:
    if value is None:
        return ""
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso(value: datetime | float | None) -> str:
    if value is None:
        return ""
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).isoformat(timespec="seconds")


def _bytes(value: int | float | None) -> str:
    return "" if value is None else format_bytes(int(value))


def _duration(value: float | None) -> str:
    return "" if value is None else format_duration(value)


def _percent(used: float, total: float) -> int:
    return 0 if not total else max(0, min(100, round(100 * used / total)))


def _query(params: dict[str, Any], **changes: Any) -> str:
    """``params`` with ``changes`` as a query string (lists as repeated keys; empty values
    left out)."""
    merged = {**params, **changes}
    pairs = [
        (k, item)
        for k, v in merged.items()
        for item in (v if isinstance(v, list | tuple) else [v])
        if item not in ("", None)
    ]
    return urlencode(pairs)


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("gpuyard.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=_when, iso=_iso, size=_bytes, duration=_duration, percent=_percent)
    env.globals.update(version=__version__, query=_query)
    return env


def page(
    request: Request,
    template: str,
    caller: Caller | None,
    *,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """``template`` rendered for ``caller``, with what every page's frame needs."""
    token = session_token(request)
    context.setdefault("title", "gpuyard")
    html = (
        _environment()
        .get_template(template)
        .render(
            request=request,
            caller=caller,
            csrf_field=CSRF_FIELD,
            csrf=csrf_token(token) if token else "",
            path=request.url.path,
            notice=request.query_params.get("notice", "")[:500],
            **context,
        )
    )
    return HTMLResponse(
        html,
        status_code=status_code,
        headers={
            # Scripts and styles only from this server (style attributes draw the bars); no
            # frames; no inline scripts.
            "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
            "style-src 'self'; style-src-attr 'unsafe-inline'; "
            "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
            "Cache-Control": "no-store",
        },
    )
