"""/api/v1/pools and /api/v1/nodes/{name}/labels: thin routes over AccountService."""

from __future__ import annotations

from fastapi import APIRouter

from gpuyard.models import LabelsUpdate, NodeLabels, PoolSpec, PoolUpdate, PoolView
from gpuyard.server.deps import ServicesDep, UserDep

router = APIRouter(tags=["pool"])


@router.get("/pools")
def list_pools(services: ServicesDep) -> list[PoolView]:
    return services.accounts.list_pools()


@router.get("/pools/{name}")
def get_pool(name: str, services: ServicesDep) -> PoolView:
    return services.accounts.get_pool(name)


@router.post("/pools", status_code=201)
def create_pool(spec: PoolSpec, services: ServicesDep, user: UserDep) -> PoolView:
    return services.accounts.create_pool(spec, actor=user)


@router.patch("/pools/{name}")
def update_pool(name: str, change: PoolUpdate, services: ServicesDep, user: UserDep) -> PoolView:
    return services.accounts.update_pool(name, change, actor=user)


@router.get("/nodes/{name}/labels")
def node_labels(name: str, services: ServicesDep) -> NodeLabels:
    return services.accounts.node_labels(name)


@router.patch("/nodes/{name}/labels")
def set_node_labels(
    name: str, change: LabelsUpdate, services: ServicesDep, user: UserDep
) -> NodeLabels:
    """Set and remove admin labels (pool, zone, network, driver, …) on one node."""
    return services.accounts.set_labels(name, change, actor=user)
