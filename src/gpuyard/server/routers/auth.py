"""/api/v1/tokens, /api/v1/settings, /api/v1/audit: sign-in, the pool's settings, the trail."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from gpuyard.models import (
    AuditEntry,
    IssuedToken,
    PoolSettings,
    PoolSettingsUpdate,
    TokenSpec,
    TokenView,
)
from gpuyard.server.deps import MAX_ID, ServicesDep, SignedInDep, UserDep

router = APIRouter(tags=["access"])


@router.post("/tokens", status_code=201)
def create_token(spec: TokenSpec, services: ServicesDep, signed: SignedInDep) -> IssuedToken:
    """A new API token (for yourself; admins may name another user). The token is in this
    answer only. It is a child of the token this request signs in with: it expires no later
    (its life is cut short to fit) and is revoked with it."""
    return services.tokens.issue(spec, actor=signed.caller.name, parent=signed)


@router.get("/tokens")
def list_tokens(
    services: ServicesDep,
    user: UserDep,
    of: Annotated[
        str | None,
        Query(max_length=64, description="Whose tokens (admins; `*` for everyone's)."),
    ] = None,
) -> list[TokenView]:
    return services.tokens.list_tokens(actor=user, user=of)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(
    token_id: Annotated[int, Path(ge=1, le=MAX_ID)], services: ServicesDep, user: UserDep
) -> Response:
    """Revoke one of your tokens (admins: anyone's)."""
    services.tokens.revoke(token_id, actor=user)
    return Response(status_code=204)


@router.get("/settings")
def get_settings(services: ServicesDep) -> PoolSettings:
    return services.policy.settings()


@router.patch("/settings")
def update_settings(
    change: PoolSettingsUpdate, services: ServicesDep, user: UserDep
) -> PoolSettings:
    """Change the pool's settings (admins): ``sharing`` off makes every job's access for
    others none."""
    return services.policy.update_settings(change, actor=user)


@router.get("/audit")
def audit(
    services: ServicesDep,
    user: UserDep,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Entries after this id.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    actor: Annotated[str | None, Query(max_length=96, description="e.g. user:bob")] = None,
    action: Annotated[str | None, Query(max_length=32, description="e.g. job.stop")] = None,
    target: Annotated[str | None, Query(max_length=160, description="e.g. job:12")] = None,
) -> list[AuditEntry]:
    """Who did what to which job or setting, and when (admins)."""
    return services.policy.audit_entries(
        reader=user, after=after, limit=limit, actor=actor, action=action, target=target
    )
