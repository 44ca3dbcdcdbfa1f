"""/metrics: the pool in Prometheus' text format. Open to a scraper without a token (the pool
as a whole); with one, the usage of the running jobs its holder may see, by id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from gpuyard.server.deps import ServicesDep

router = APIRouter(tags=["pool"])


@router.get("/metrics", response_class=Response)
def metrics(
    request: Request,
    services: ServicesDep,
    authorization: Annotated[
        str | None,
        Header(description="`Bearer <token>` for per-job series (none: aggregates only)."),
    ] = None,
) -> Response:
    """Jobs by state, queue depth per pool and tier, GPUs and allocation per pool, nodes by
    state, faults and restarts, reconcile and scheduling pass times, node usage; with a
    token, the usage of the running jobs its holder may see (docs/monitoring.md). A token
    that is not valid is refused (401), never taken for none."""
    viewer = None if authorization is None else services.tokens.authenticate(authorization).name
    # The classic text format: every Prometheus (2.x and 3.x) and agent reads it.
    body = request.app.state.metrics.exposition(viewer)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)
