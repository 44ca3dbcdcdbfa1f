"""/metrics: the pool in Prometheus' text format, open to a scraper (aggregates only)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

router = APIRouter(tags=["pool"])


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Jobs by state, queue depth per pool and tier, GPUs and allocation per pool, nodes by
    state, faults and restarts, reconcile and scheduling pass times (docs/monitoring.md)."""
    # The classic text format: every Prometheus (2.x and 3.x) and agent reads it.
    body = generate_latest(request.app.state.metrics)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)
