"""/api/v1/nodes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpuyard.models import CordonRequest, NodeView
from gpuyard.models.usage import NodeUsageSeries, Window
from gpuyard.server.deps import Services, ServicesDep, UserDep

router = APIRouter(tags=["pool"])


@router.get("/nodes")
def list_nodes(services: ServicesDep, user: UserDep) -> list[NodeView]:
    """Every node; of the jobs on it, only those the caller may see are named."""
    return services.nodes.list_nodes(actor=user)


@router.get("/nodes/{name}")
def get_node(name: str, services: ServicesDep, user: UserDep) -> NodeView:
    """One node, with every finding of its latest health inspection."""
    return services.nodes.get_node(name, actor=user)


@router.get("/nodes/{name}/usage")
def node_usage(
    name: str,
    services: ServicesDep,
    window: Annotated[
        Window, Query(description="realtime (10 s samples), 1h, 1d or 7d (averages).")
    ] = Window.REALTIME,
) -> NodeUsageSeries:
    """CPU, memory and GPU use of the node over a window (docs/monitoring.md)."""
    return services.usage.node(name, window=window)


@router.post("/nodes/{name}/cordon")
def cordon_node(name: str, body: CordonRequest, services: ServicesDep, user: UserDep) -> NodeView:
    """Keep the node out of scheduling; jobs running on it go on."""
    services.accounts.cordon(name, body.reason, actor=user)
    return _one(services, name, user)


@router.post("/nodes/{name}/drain")
def drain_node(name: str, body: CordonRequest, services: ServicesDep, user: UserDep) -> NodeView:
    """Cordon the node and suspend the jobs running on it (they resume elsewhere)."""
    services.accounts.cordon(name, body.reason, actor=user, drain=True)
    return _one(services, name, user)


@router.post("/nodes/{name}/uncordon")
def uncordon_node(name: str, services: ServicesDep, user: UserDep) -> NodeView:
    services.accounts.uncordon(name, actor=user)
    return _one(services, name, user)


@router.delete("/nodes/{name}", status_code=204)
def remove_node(name: str, services: ServicesDep, user: UserDep) -> None:
    """Forget a gone node that no job holds (admins); any other is a 409 saying why."""
    services.nodes.remove_node(name, actor=user)


def _one(services: Services, name: str, user: str) -> NodeView:
    return services.nodes.get_node(name, actor=user)
