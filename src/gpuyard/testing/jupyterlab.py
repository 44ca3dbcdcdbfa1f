"""Driving JupyterLab's own page in a browser (Playwright), for the web UI's test of
interactive jobs and its screenshots: a new notebook from the launcher, one cell run in it.

JupyterLab's page loads slowly on a small, busy machine (its scripts are several megabytes
and it starts its kernel after the page): the waits are long on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

__all__ = ["LOAD_TIMEOUT", "run_in_new_notebook"]

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
