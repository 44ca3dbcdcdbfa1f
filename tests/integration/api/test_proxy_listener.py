"""The proxy forwards to an interactive job's port only while its owner's account listens
there (docs/interactive.md): a process of another account that took the port first gets none
of the owner's requests. The listener and the accounts are the test's (the seams ``listener``
and ``owner_uid``); the /proc reading is tests/unit/executors/test_listeners.py's."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpuyard.client import Client
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo
from gpuyard.testing.auth import TokenFor


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor([NodeInfo("n0", "127.0.0.1", gpus=0, cpus=64, memory=1 << 40)])


def test_another_accounts_listener_gets_no_request(
    app: Any, api_url: str, token_for: TokenFor, controller: Controller
) -> None:
    ada = Client(api_url, token=token_for("ada"))
    job_id = ada.submit({"service": {"kind": "notebook"}}).id
    for _ in range(3):
        controller.tick()
    interactive = app.state.services.interactive
    interactive.owner_uid = {"ada": 1001}.get
    interactive.listener = lambda _address, _port: 1002  # mallory took the port
    headers = {"authorization": f"Bearer {ada.token}"}
    answer = httpx.get(f"{api_url}/proxy/{job_id}/lab", headers=headers)
    assert answer.status_code == 503
    assert "another account's process (uid 1002)" in answer.json()["detail"]
    assert ada.service(job_id).state.value == "starting"
    interactive.listener = lambda _address, _port: 1001  # hers: forwarded (nothing answers)
    answer = httpx.get(f"{api_url}/proxy/{job_id}/lab", headers=headers)
    assert answer.status_code == 503 and "does not answer yet" in answer.json()["detail"]
