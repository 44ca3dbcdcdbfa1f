"""A headless Chromium for the web UI's tests and screenshots: Debian's own build (``make
chromium`` installs it), driven by Playwright. Playwright's bundled browser download needs the
internet; the system's Chromium does not."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser

__all__ = ["chromium", "chromium_path", "unavailable_reason"]

_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    for name in _NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def unavailable_reason() -> str | None:
    """Why no browser can run here (None: one can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return "no Chromium on PATH: `make chromium` (apt-get install chromium) installs it"
    return None


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium (one process; open a context per user)."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise RuntimeError(unavailable_reason() or "no Chromium")
    with sync_playwright() as driver:
        # --no-sandbox: as root (CI, this machine) Chromium refuses to start sandboxed.
        browser = driver.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()
