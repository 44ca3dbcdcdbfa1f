"""How a queued job's forecast is stored (the ``prediction`` column): what the controller's
forecaster writes and the API reads, with the version of the job it was made for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuyard.scheduler.predict import Forecast

__all__ = ["AHEAD_KEPT", "forecast_to_store", "stored_forecast"]

AHEAD_KEPT = 200
"""Ids of the jobs ahead kept per forecast (the last ones before it)."""


def forecast_to_store(f: Forecast, version: int) -> dict[str, Any]:
    ahead: Sequence[int] = f.ahead  # a view of the replay's starts: index it, do not copy it
    return {
        "job": f.job_id,
        "version": version,
        "start_at": f.start_at,
        "now": f.now,
        "ahead": [ahead[i] for i in range(max(0, len(ahead) - AHEAD_KEPT), len(ahead))],
        "waits_for": list(f.waits_for),
        "never": f.never,
        "unknown": f.unknown,
        "stopped": f.stopped,
        "copy": f.copy,
    }


def stored_forecast(data: dict[str, Any], version: int) -> Forecast | None:
    """A job's stored forecast, if it was made for this version of the job."""
    if data.get("version") != version:
        return None
    return Forecast(
        job_id=int(data["job"]),
        start_at=data.get("start_at"),
        now=bool(data.get("now")),
        ahead=tuple(data.get("ahead", ())),
        waits_for=tuple(data.get("waits_for", ())),
        never=data.get("never"),
        unknown=bool(data.get("unknown")),
        stopped=data.get("stopped"),
        copy=float(data.get("copy") or 0.0),
    )
