"""The web UI in a real browser (Debian's Chromium through Playwright) against a real pool:
sign in, submit from the form while the queue prediction shows, watch the job run with its
log, a read-only viewer who sees no stop button and whom the API refuses anyway, the nodes
page, reading without JavaScript, and stopping the job.

One pool, one browser, one scenario test: its steps hand on one job, and `xdist_group` does
not keep tests together with pytest 9 and pytest-xdist 3.8 (xdist sets ``item._nodeid``, which
pytest 9 no longer reads), so separate tests could land on different workers."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gpuyard.testing.browser import chromium, unavailable_reason
from gpuyard.testing.process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("web")]

REASON = unavailable_reason()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=f"no browser: {REASON}"))

if not REASON:
    from playwright.sync_api import Browser, Page, expect

STEPS = "import time; [print('step', i, flush=True) or time.sleep(0.1) for i in range(3000)]"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("web") / "home"
    pool = ServerProcess(home, "--virtual-nodes", "2", "--gpus-per-node", "2")
    try:
        yield pool.start()
    finally:
        pool.stop()


@pytest.fixture(scope="module")
def owner_token(pool: ServerProcess) -> str:
    return (pool.home / "owner.token").read_text().strip()


@pytest.fixture(scope="module")
def viewer_token(pool: ServerProcess) -> str:
    pool.cli("users", "add", "viewer")
    issued: dict[str, Any] = json.loads(pool.cli("tokens", "create", "viewer", "--json").stdout)
    return str(issued["token"])


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def owner(browser: Browser, pool: ServerProcess) -> Iterator[Page]:
    context = browser.new_context(base_url=pool.url, viewport={"width": 1280, "height": 720})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


def sign_in(page: Page, token: str) -> None:
    page.goto("/jobs")
    expect(page).to_have_url(re.compile(r"/login\?next=/jobs$"))
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/jobs(\?|$)"))


def sign_in_refuses_a_bad_token_then_signs_in(owner: Page, owner_token: str) -> None:
    owner.goto("/login")
    owner.get_by_label("Token").fill("gy_not-a-token")
    owner.get_by_role("button", name="Sign in").click()
    expect(owner.locator("#login-error")).to_contain_text("unknown")
    sign_in(owner, owner_token)
    expect(owner.get_by_role("heading", name=re.compile("^Jobs"))).to_be_visible()
    cookie = next(c for c in owner.context.cookies() if c["name"] == "gpuyard_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"


def submit_from_the_form_with_a_live_prediction(owner: Page) -> int:
    owner.goto("/jobs/new")
    command = owner.get_by_label("Command", exact=True)
    command.fill("KEY=1 python3 train.py")
    # The command rules, checked by the server as one types.
    expect(owner.locator('[data-error-for="command"]')).to_contain_text("executable")
    command.fill(f'{sys.executable} -c "{STEPS}"')
    owner.get_by_label("Name", exact=True).fill("web-e2e")
    owner.get_by_label("GPUs", exact=True).fill("1")
    owner.get_by_label("Access for others in your group").select_option("read-only")
    expect(owner.locator('[data-error-for="command"]')).to_have_text("")
    expect(owner.locator("#prediction-text")).to_contain_text(re.compile("start", re.I))
    expect(owner.locator("#spec-yaml")).to_contain_text("name: web-e2e")
    expect(owner.locator("#spec-yaml")).to_contain_text("access: read-only")
    owner.get_by_role("button", name="Submit").click()
    expect(owner).to_have_url(re.compile(r"/jobs/\d+\?notice="))
    found = re.search(r"/jobs/(\d+)", owner.url)
    assert found is not None
    return int(found.group(1))


def watch_the_job_run_with_its_log(owner: Page, job: int) -> None:
    owner.goto(f"/jobs/{job}")
    expect(owner.locator("#job-state")).to_contain_text("running", timeout=30_000)
    log = owner.locator("#log-text")
    expect(log).to_contain_text("step 3", timeout=20_000)
    # Follow: a line printed now shows within a second or so (the page polls every 250 ms).
    expect(log).to_contain_text("step 25", timeout=10_000)
    before = log.inner_text().count("\n")
    time.sleep(1.0)
    assert log.inner_text().count("\n") > before, "the log did not grow while followed"
    owner.get_by_label("Search").fill("step 1")
    expect(owner.locator("#log-matches")).to_contain_text("matching line")
    expect(owner.get_by_role("link", name="Download")).to_have_attribute(
        "href", f"/jobs/{job}/log.txt?worker=0"
    )


def a_read_only_viewer_sees_no_stop_and_the_api_refuses(
    browser: Browser, pool: ServerProcess, viewer_token: str, job: int
) -> None:
    context = browser.new_context(base_url=pool.url, viewport={"width": 390, "height": 844})
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        sign_in(page, viewer_token)
        page.goto(f"/jobs/{job}")
        expect(page.locator("#job-state")).to_contain_text("running")
        expect(page.get_by_role("link", name="Clone")).to_be_visible()
        assert page.locator("#stop-job").count() == 0
        assert page.get_by_role("button", name="Stop").count() == 0
    finally:
        context.close()
    refused = httpx.post(
        f"{pool.url}/api/v1/jobs/{job}/stop",
        headers={"Authorization": f"Bearer {viewer_token}"},
        timeout=10,
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "permission_denied"


def node_view_shows_the_job_on_its_gpu(owner: Page, job: int) -> None:
    owner.goto("/nodes")
    expect(owner.get_by_role("heading", name=re.compile("^Nodes"))).to_be_visible()
    expect(owner.locator("article.node")).to_have_count(2)
    expect(
        owner.locator(".usage-notation code").filter(has_text=re.compile(r"^\d\(\d\):web-e2e$"))
    ).to_have_count(1)
    expect(owner.get_by_role("link", name=f"{job} web-e2e")).to_be_visible()


def pages_read_without_javascript_and_by_keyboard(
    browser: Browser, pool: ServerProcess, owner: Page, job: int
) -> None:
    """In a context of its own, with the owner's web session (a token of its own, made at
    sign-in: the API token itself is no cookie)."""
    [session] = [c for c in owner.context.cookies() if c["name"] == "gpuyard_session"]
    context = browser.new_context(base_url=pool.url, java_script_enabled=False)
    context.set_default_timeout(15_000)
    context.add_cookies([{"name": "gpuyard_session", "value": session["value"], "url": pool.url}])
    try:
        page = context.new_page()
        page.goto(f"/jobs/{job}?q=step+2")
        expect(page.locator("#log-text")).to_contain_text("step 2")
        assert "step 3\n" not in page.locator("#log-text").inner_text()
        page.goto("/jobs?sort=name&order=asc")
        expect(page.get_by_role("link", name="web-e2e")).to_be_visible()
        page.keyboard.press("Tab")
        expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
        page.keyboard.press("Tab")
        expect(page.get_by_role("link", name="gpuyard")).to_be_focused()
    finally:
        context.close()


def stop_the_job_from_its_page(owner: Page, pool: ServerProcess, job: int) -> None:
    owner.goto(f"/jobs/{job}")
    owner.get_by_role("button", name="Stop").click()
    expect(owner.locator(".notice")).to_contain_text("stop requested")
    expect(owner.locator("#job-state")).to_contain_text("stopped", timeout=30_000)
    assert pool.cli_json("show", str(job))["status"] == "stopped"


def test_the_web_ui_from_sign_in_to_stopping_a_job(
    browser: Browser, pool: ServerProcess, owner: Page, owner_token: str, viewer_token: str
) -> None:
    """One scenario, step by step (each step a function above): the steps hand on one job,
    so they are one test and cannot be split between test workers."""
    sign_in_refuses_a_bad_token_then_signs_in(owner, owner_token)
    job = submit_from_the_form_with_a_live_prediction(owner)
    watch_the_job_run_with_its_log(owner, job)
    a_read_only_viewer_sees_no_stop_and_the_api_refuses(browser, pool, viewer_token, job)
    node_view_shows_the_job_on_its_gpu(owner, job)
    pages_read_without_javascript_and_by_keyboard(browser, pool, owner, job)
    stop_the_job_from_its_page(owner, pool, job)
