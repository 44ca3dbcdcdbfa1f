"""Interactive jobs from the web UI in a real browser (Debian's Chromium through Playwright)
against a real pool, with JupyterLab from PyPI (issue 27's acceptance): sign in, open a
training job's page, "Create development environment", wait on the new job's page until its
JupyterLab is ready, Open it (through the pool's proxy), and run a cell in a new notebook.

JupyterLab and its kernel live in this environment's bin directory, put first on the pool's
``PATH``: a service job without a ``PATH`` of its own gets the pool's (services/interactive.py).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuyard.testing.browser import chromium, unavailable_reason
from gpuyard.testing.jupyterlab import LOAD_TIMEOUT, run_in_new_notebook
from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("web")]

REASON = unavailable_reason()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=f"no browser: {REASON}"))

if not REASON:
    from playwright.sync_api import Browser, Page, expect

VENV_BIN = str(Path(sys.executable).parent)
"""Where this environment's jupyter is."""


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("web-interactive") / "home"
    path = VENV_BIN + os.pathsep + os.environ.get("PATH", "")
    args = ("--virtual-nodes", "1", "--gpus-per-node", "2", "--cpus-per-node", "4")
    pool = ServerProcess(home, *args, settings={"PATH": path})
    try:
        yield pool.start()
    finally:
        pool.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as browser:
        yield browser


def _training_job(pool: ServerProcess, token: str) -> int:
    """A short training job of the pool's owner, of one GPU."""
    answer = httpx.post(
        f"{pool.url}/api/v1/jobs",
        headers={"Authorization": f"Bearer {token}"},
        json={
            "name": "train-e2e",
            "command": f"{sys.executable} -c \"print('trained')\"",
            "resources": {"gpus": 1, "cpus": 1},
        },
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def _sign_in(page: Page, token: str) -> None:
    page.goto("/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/jobs(\?|$)"))


def _create_environment(page: Page, job: int) -> int:
    """From job ``job``'s page; the new job's id (its page is where the button leads)."""
    page.goto(f"/jobs/{job}")
    expect(page.locator("#job-state")).to_contain_text("succeeded", timeout=30_000)
    expect(page.get_by_role("button", name="Create TensorBoard")).to_be_visible()
    page.get_by_role("button", name="Create development environment").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+\?notice="))
    found = re.search(r"/jobs/(\d+)", page.url)
    assert found is not None and int(found.group(1)) != job
    expect(page.get_by_role("heading", name=re.compile(f"notebook-of-{job}"))).to_be_visible()
    return int(found.group(1))


def test_a_notebook_made_from_a_jobs_page_runs_a_cell(
    browser: Browser, pool: ServerProcess
) -> None:
    token = (pool.home / "owner.token").read_text().strip()
    job = _training_job(pool, token)
    context = browser.new_context(base_url=pool.url, viewport={"width": 1280, "height": 720})
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        _sign_in(page, token)
        notebook = _create_environment(page, job)
        # Queued, then running (the page reloads), then ready once JupyterLab answers.
        state = page.locator("#service-state")
        expect(state).to_have_text("ready", timeout=LOAD_TIMEOUT)
        with context.expect_page() as opened:
            page.get_by_role("link", name="Open").click()
        lab = opened.value
        expect(lab).to_have_url(re.compile(f"/proxy/{notebook}/lab"))
        output = run_in_new_notebook(lab, "print(6*7)")
        expect(output).to_have_text("42", timeout=LOAD_TIMEOUT)
        page.goto("/jobs")
        expect(page.locator("#h-environments")).to_be_visible()
        expect(page.get_by_role("link", name=f"{notebook} notebook-of-{job}")).to_be_visible()
    finally:
        context.close()
