"""Alerts reach the pool's webhook as JSON, and a dead receiver costs nothing but a log line."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from gpuyard.controller.alerts import WebhookAlerts


def test_an_alert_is_posted_as_json_and_a_dead_receiver_is_survived() -> None:
    received: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.headers["Content-Type"], json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dead = WebhookAlerts("http://127.0.0.1:9/")  # discard port: refused
        dead({"kind": "performance", "job": 0})
        alerts = WebhookAlerts(f"http://127.0.0.1:{server.server_port}/hook")
        alerts({"kind": "performance", "job": 7, "evidence": "step rate …"})
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert received == [
            ("application/json", {"kind": "performance", "job": 7, "evidence": "step rate …"})
        ]
    finally:
        server.shutdown()
