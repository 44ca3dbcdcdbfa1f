"""Sign-in, and the pool's pages: nodes, pools and quotas, administration."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import GpuyardError, InvalidSpec, PermissionDenied
from gpuyard.models import NodeView
from gpuyard.models.accounts import IssuedToken, PoolSettingsUpdate, TokenKind, TokenSpec
from gpuyard.models.ids import MAX_ID
from gpuyard.models.usage import NodeNow
from gpuyard.services.auth import TokenService
from gpuyard.services.nodes import NodeHolder
from gpuyard.web.context import services
from gpuyard.web.render import page
from gpuyard.web.routing import CallerDep, WebRoute, back_to
from gpuyard.web.session import COOKIE, check_post, read_form, session_token, signed_in

__all__ = ["router", "usage_notation"]

router = APIRouter(route_class=WebRoute, include_in_schema=False)

SESSION_LIFE = 12 * 3600


_LOCAL_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9/_.~%?=&+-]*")


def _safe_next(target: str) -> str:
    """Only a path of this site: never ``//host``, a scheme, a backslash or a control
    character (a browser drops tabs and newlines, so ``/\t/host`` would be ``//host``)."""
    return target if _LOCAL_PATH.fullmatch(target) else "/jobs"


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, next: str = "/jobs") -> HTMLResponse:
    caller = await signed_in(request)
    return page(request, "login.html", caller, title="Sign in", next=_safe_next(next), error="")


@router.post("/login", response_model=None)
async def login(request: Request) -> Response:
    form = await read_form(request)
    check_post(request, form, session=False)
    token = (form.get("token") or [""])[-1].strip()
    target = _safe_next((form.get("next") or ["/jobs"])[-1])
    tokens = services(request).tokens
    try:
        session = await run_in_threadpool(_open_session, tokens, token)
    except GpuyardError as exc:
        return page(
            request,
            "login.html",
            None,
            title="Sign in",
            next=target,
            error=exc.detail,
            status_code=401,
        )
    response = back_to(target, f"signed in as {session.user}")
    response.set_cookie(
        COOKIE,
        session.token,
        max_age=SESSION_LIFE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await read_form(request)
    check_post(request, form)
    token = session_token(request)
    if token:
        await run_in_threadpool(services(request).tokens.end_session, token)
    response = back_to("/login", "signed out")
    response.delete_cookie(COOKIE, path="/")
    return response


def _open_session(tokens: TokenService, api_token: str) -> IssuedToken:
    """A web session made with ``api_token`` (a child of it: it expires no later and goes
    when that one is revoked); the cookie carries the session's token, never the API one."""
    signed = tokens.signed_in(f"Bearer {api_token}")
    spec = TokenSpec(label="web session", expires_in=SESSION_LIFE)
    return tokens.issue(spec, actor=signed.caller.name, parent=signed, kind=TokenKind.SESSION)


# -- nodes ----------------------------------------------------------------------------------


def usage_notation(holders: list[NodeHolder]) -> list[str]:
    """docs/web.md's ``1(1):application-name``: the card's place in the node, the virtual
    card's number (gpuyard does not split cards, so it is the card itself), the job. A job
    holding CPUs only is ``cpu(N):name``."""
    found: list[str] = []
    for h in holders:
        name = h.name or "another user's job"
        if h.gpus:
            found.extend(f"{g}({g}):{name}" for g in h.gpus)
        else:
            found.append(f"cpu({h.cpus:g}):{name}")
    return found


@router.get("/nodes", response_class=HTMLResponse)
def nodes(request: Request, caller: CallerDep) -> HTMLResponse:
    s = services(request)
    listed = s.nodes.list_nodes(actor=caller.name)
    holders = s.nodes.holders(actor=caller.name)
    latest: dict[str, NodeNow] = {n.name: n for n in s.usage.now(actor=caller.name).nodes}
    return page(
        request,
        "nodes.html",
        caller,
        title="Nodes",
        nodes=listed,
        notation={n.name: usage_notation(holders.get(n.name, [])) for n in listed},
        holders=holders,
        latest=latest,
    )


# -- pools and quotas -----------------------------------------------------------------------


def _pool_totals(listed: list[NodeView]) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for n in listed:
        t = totals[n.labels.get("pool", "default")]
        t["nodes"] += 1
        t["gpus"] += n.gpus
        t["gpus_used"] += n.gpus_used
        t["cpus"] += n.cpus
        t["cpus_used"] += n.cpus_used
        t["memory"] += n.memory
        t["memory_used"] += n.memory_used
    return {k: dict(v) for k, v in totals.items()}


@router.get("/pools", response_class=HTMLResponse)
def pools(request: Request, caller: CallerDep) -> HTMLResponse:
    s = services(request)
    return page(
        request,
        "pools.html",
        caller,
        title="Pools and quotas",
        pools=s.accounts.list_pools(),
        totals=_pool_totals(s.nodes.list_nodes(actor=caller.name)),
        quotas=s.accounts.list_quotas(),
        groups=s.accounts.list_groups(),
    )


# -- administration -------------------------------------------------------------------------


@router.get("/admin", response_class=HTMLResponse)
def admin(
    request: Request,
    caller: CallerDep,
    actor: Annotated[str, Query(max_length=96)] = "",
    action: Annotated[str, Query(max_length=32)] = "",
) -> HTMLResponse:
    if not caller.admin:
        raise PermissionDenied(
            f"only admins may open the administration page; you ({caller.name}) are not an admin"
        )
    s = services(request)
    audit = s.policy.audit_entries(
        reader=caller.name, limit=200, actor=actor or None, action=action or None, newest=True
    )
    context: dict[str, Any] = {
        "users": s.accounts.list_users(actor=caller.name),
        "groups": s.accounts.list_groups(),
        "tokens": s.tokens.list_tokens(actor=caller.name, user="*"),
        "settings": s.policy.settings(),
        "audit": audit,
        "filters": {"actor": actor, "action": action},
    }
    return page(request, "admin.html", caller, title="Administration", **context)


@router.post("/admin/sharing")
async def sharing(request: Request, caller: CallerDep) -> Response:
    form = await read_form(request)
    check_post(request, form)
    value = (form.get("sharing") or [""])[-1]
    if value not in ("on", "off"):
        raise InvalidSpec("sharing: on or off")
    change = PoolSettingsUpdate(sharing=value == "on")
    await run_in_threadpool(services(request).policy.update_settings, change, actor=caller.name)
    return back_to("/admin", f"sharing turned {value}")


@router.post("/admin/tokens/{token_id}/revoke")
async def revoke(
    request: Request, caller: CallerDep, token_id: Annotated[int, Path(ge=1, le=MAX_ID)]
) -> Response:
    form = await read_form(request)
    check_post(request, form)
    await run_in_threadpool(services(request).tokens.revoke, token_id, actor=caller.name)
    return back_to("/admin", f"token {token_id} revoked")
