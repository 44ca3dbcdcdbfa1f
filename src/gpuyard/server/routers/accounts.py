"""/api/v1/users, /api/v1/groups, /api/v1/quotas: thin routes over AccountService.

Every route needs a signed-in user; writes are for admins (the service says so with a 403),
and so is the list of users (anyone may read their own record).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from gpuyard.models import (
    GroupSpec,
    GroupUpdate,
    GroupView,
    Priority,
    QuotaKind,
    QuotaSpec,
    QuotaView,
    UserSpec,
    UserUpdate,
    UserView,
)
from gpuyard.server.deps import ServicesDep, UserDep

router = APIRouter(tags=["accounts"])


@router.get("/users")
def list_users(services: ServicesDep, user: UserDep) -> list[UserView]:
    """Every user (admins only)."""
    return services.accounts.list_users(actor=user)


@router.get("/users/{name}")
def get_user(name: str, services: ServicesDep, user: UserDep) -> UserView:
    """One user: yourself (``me``), or anyone for admins."""
    return services.accounts.get_user(name, actor=user)


@router.post("/users", status_code=201)
def create_user(spec: UserSpec, services: ServicesDep, user: UserDep) -> UserView:
    return services.accounts.create_user(spec, actor=user)


@router.patch("/users/{name}")
def update_user(name: str, change: UserUpdate, services: ServicesDep, user: UserDep) -> UserView:
    return services.accounts.update_user(name, change, actor=user)


@router.get("/groups")
def list_groups(services: ServicesDep) -> list[GroupView]:
    return services.accounts.list_groups()


@router.get("/groups/{name}")
def get_group(name: str, services: ServicesDep) -> GroupView:
    return services.accounts.get_group(name)


@router.post("/groups", status_code=201)
def create_group(spec: GroupSpec, services: ServicesDep, user: UserDep) -> GroupView:
    return services.accounts.create_group(spec, actor=user)


@router.patch("/groups/{name}")
def update_group(name: str, change: GroupUpdate, services: ServicesDep, user: UserDep) -> GroupView:
    return services.accounts.update_group(name, change, actor=user)


@router.delete("/groups/{name}", status_code=204)
def delete_group(name: str, services: ServicesDep, user: UserDep) -> Response:
    services.accounts.delete_group(name, actor=user)
    return Response(status_code=204)


@router.get("/quotas")
def list_quotas(
    services: ServicesDep,
    kind: Annotated[QuotaKind | None, Query(description="user or group")] = None,
    subject: Annotated[str | None, Query(description="A user's or group's name.")] = None,
) -> list[QuotaView]:
    return services.accounts.list_quotas(kind=kind, subject=subject)


@router.post("/quotas")
def set_quota(spec: QuotaSpec, services: ServicesDep, user: UserDep) -> QuotaView:
    """Set (or replace) the quota of one user or group at one tier."""
    return services.accounts.set_quota(spec, actor=user)


@router.delete("/quotas/{kind}/{subject}/{tier}", status_code=204)
def clear_quota(
    kind: QuotaKind, subject: str, tier: Priority, services: ServicesDep, user: UserDep
) -> Response:
    services.accounts.clear_quota(kind, subject, tier, actor=user)
    return Response(status_code=204)
