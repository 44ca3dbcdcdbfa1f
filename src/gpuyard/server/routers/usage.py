"""/api/v1/usage: the pool now, for `gpuyard top`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpuyard.models.usage import PoolUsage
from gpuyard.server.deps import ServicesDep, UserDep

router = APIRouter(tags=["pool"])


@router.get("/usage")
def pool_usage(
    services: ServicesDep,
    user: UserDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most jobs to list.")] = 20,
) -> PoolUsage:
    """Each node's latest CPU, memory and GPU figures, and the running jobs you may view,
    busiest first."""
    return services.usage.now(actor=user, limit=limit)
