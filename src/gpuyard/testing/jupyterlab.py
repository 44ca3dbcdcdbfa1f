"""Driving JupyterLab for the tests and benchmarks of interactive jobs: its own page in a
browser (Playwright: a new notebook from the launcher, one cell run in it), and a kernel over
its WebSocket (Jupyter's messaging protocol: one cell run, what it printed).

JupyterLab's page loads slowly on a small, busy machine (its scripts are several megabytes
and it starts its kernel after the page): the waits are long on purpose.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

__all__ = ["LOAD_TIMEOUT", "execute_request", "run_cell", "run_in_new_notebook"]

LOAD_TIMEOUT = 90_000
"""Milliseconds JupyterLab may take to show its launcher, and a cell to print."""


def run_in_new_notebook(lab: Page, code: str) -> Locator:
    """In JupyterLab's page ``lab``: a new Python notebook from the launcher, ``code`` typed
    into its first cell and run (Shift+Enter); the cell's output area."""
    from playwright.sync_api import expect

    card = lab.locator('.jp-LauncherCard[data-category="Notebook"]').first
    expect(card).to_be_visible(timeout=LOAD_TIMEOUT)
    # A cell run before its kernel is connected stays unrun ("[ ]:"), and the kernel's status
    # reads "idle" before the kernel starts too: wait for the kernel's WebSocket, then idle.
    with lab.expect_websocket(lambda ws: "/channels" in ws.url, timeout=LOAD_TIMEOUT):
        card.click()
    kernel = lab.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator").first
    expect(kernel).to_have_attribute("data-status", "idle", timeout=LOAD_TIMEOUT)
    editor = lab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    editor.click()
    lab.keyboard.type(code)
    lab.keyboard.press("Shift+Enter")
    return lab.locator(".jp-NotebookPanel .jp-Cell .jp-OutputArea-output").first


def execute_request(code: str) -> tuple[str, str]:
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "username": "bench",
        "session": uuid.uuid4().hex,
        "msg_type": "execute_request",
        "version": "5.3",
        "date": "",
    }
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    message = {
        "header": header,
        "parent_header": {},
        "metadata": {},
        "content": content,
        "channel": "shell",
        "buffers": [],
    }
    return msg_id, json.dumps(message)


async def run_cell(ws: Any, code: str) -> str:
    """Run ``code`` in the kernel behind ``ws``; what it printed."""
    msg_id, message = execute_request(code)
    await ws.send(message)
    out: list[str] = []
    while True:
        data = json.loads(await ws.recv())
        if data.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if data["msg_type"] == "stream":
            out.append(data["content"]["text"])
        if data["msg_type"] == "error":
            raise RuntimeError(f"the cell failed: {data['content'].get('ename')}")
        if data["msg_type"] == "status" and data["content"]["execution_state"] == "idle":
            return "".join(out)
