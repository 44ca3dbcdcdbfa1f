"""Alerts leave the pool through a webhook an admin set (``GPUYARD_ALERT_WEBHOOK``).

Each alert is one JSON POST, sent beside the controller's loop (a slow or dead receiver never
holds a pass up), tried once with a short timeout; a failure is logged, not retried. The URL is
the pool's, never a job's: a job cannot make the pool send requests where it likes.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import httpx

__all__ = ["WebhookAlerts"]

log = logging.getLogger("gpuyard.controller")

TIMEOUT = 5.0
BACKLOG = 1000
"""Alerts waiting to be sent at most; more are dropped (and logged)."""


class WebhookAlerts:
    def __init__(self, url: str) -> None:
        self.url = url
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=BACKLOG)
        self._thread = threading.Thread(target=self._run, name="gpuyard-alerts", daemon=True)
        self._thread.start()

    def __call__(self, payload: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            log.warning("alert dropped, %d waiting already: %s", BACKLOG, payload)

    def _run(self) -> None:
        with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as client:
            while True:
                payload = self._queue.get()
                try:
                    client.post(self.url, json=payload).raise_for_status()
                except httpx.HTTPError as exc:
                    log.warning("alert webhook %s failed: %s", self.url, exc)
