"""/api/v1/nodes and /api/v1/health."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gpuyard import __version__
from gpuyard.models import NodeView
from gpuyard.server.deps import ServicesDep

router = APIRouter(tags=["pool"])


@router.get("/nodes")
def list_nodes(services: ServicesDep) -> list[NodeView]:
    return services.nodes.list_nodes()


@router.get("/health")
def health(request: Request, services: ServicesDep) -> dict[str, Any]:
    controller = request.app.state.controller_health
    return {
        "status": "ok",
        "version": __version__,
        "database": services.jobs.store.dialect,
        "controller": controller() if controller else None,
    }
