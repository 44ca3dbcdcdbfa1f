"""/api/v1/nodes."""

from __future__ import annotations

from fastapi import APIRouter

from gpuyard.models import NodeView
from gpuyard.server.deps import ServicesDep

router = APIRouter(tags=["pool"])


@router.get("/nodes")
def list_nodes(services: ServicesDep) -> list[NodeView]:
    return services.nodes.list_nodes()
