"""/api/v1/registry-logins: the caller's own logins at the registries images are copied
from, thin routes over RegistryLogins (docs/images.md, "Registry logins"). Each route acts on
the signed-in user's logins only; a password goes in and never comes out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from gpuyard.models.registry_login import RegistryLoginSave, RegistryLoginView
from gpuyard.server.deps import ServicesDep, UserDep

router = APIRouter(tags=["images"])

Host = Annotated[
    str,
    Path(
        min_length=1,
        max_length=255,
        description="The registry, HOST[:PORT], one of those the pool copies images from.",
    ),
]


@router.get("/registry-logins")
def list_logins(services: ServicesDep, user: UserDep) -> list[RegistryLoginView]:
    """Your saved registry logins (without their passwords)."""
    return services.registry_logins.list_logins(actor=user)


@router.put(
    "/registry-logins/{host}",
    responses={503: {"description": "The registry cannot be reached: nothing was saved."}},
)
def save_login(
    host: Host, login: RegistryLoginSave, services: ServicesDep, user: UserDep
) -> RegistryLoginView:
    """Save your login at a registry the pool copies from, once the registry accepts it."""
    return services.registry_logins.save(host, login, actor=user)


@router.delete("/registry-logins/{host}", status_code=204)
def delete_login(host: Host, services: ServicesDep, user: UserDep) -> Response:
    """Forget your login at a registry."""
    services.registry_logins.delete(host, actor=user)
    return Response(status_code=204)
