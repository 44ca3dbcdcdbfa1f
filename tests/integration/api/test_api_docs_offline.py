"""/api/docs works on an air-gapped cluster: Swagger UI renders in a real browser whose every
request outside the pool is refused, and the pool serves its own favicon."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.resources import files

import httpx
import pytest

from gpuyard.testing.browser import chromium, unavailable_reason

REASON = unavailable_reason()


def test_the_favicon_is_served(api_url: str) -> None:
    response = httpx.get(f"{api_url}/favicon.ico")
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/x-icon"
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO header


def test_the_docs_page_names_no_outside_address(api_url: str) -> None:
    page = httpx.get(f"{api_url}/api/docs")
    assert page.status_code == 200
    assert "cdn" not in page.text.lower()
    assert "https://" not in page.text and "http://" not in page.text


def test_no_web_template_or_script_loads_from_outside_the_pool() -> None:
    web = files("gpuyard.web")
    shipped = [*(web / "templates").iterdir(), *(web / "static").iterdir()]
    texts = {f.name: f.read_text() for f in shipped if f.name.endswith((".html", ".js", ".css"))}
    assert texts
    outside = re.compile(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", re.IGNORECASE)
    assert {name for name, text in texts.items() if outside.search(text)} == set()


@pytest.fixture
def offline_page(api_url: str) -> Iterator[tuple[object, list[str]]]:
    """A browser page that reaches only the pool; what it tried elsewhere is listed."""
    if REASON:
        pytest.skip(f"no browser: {REASON}")
    from playwright.sync_api import Route

    refused: list[str] = []

    def only_the_pool(route: Route) -> None:
        url = route.request.url
        if url.startswith(f"{api_url}/"):
            route.continue_()
        else:
            refused.append(url)
            route.abort()

    with chromium() as browser:
        context = browser.new_context(base_url=api_url)
        context.set_default_timeout(15_000)
        context.route("**/*", only_the_pool)
        yield context.new_page(), refused
        context.close()


def test_swagger_ui_renders_with_the_network_blocked(
    offline_page: tuple[object, list[str]],
) -> None:
    from playwright.sync_api import Page, expect

    page, refused = offline_page
    assert isinstance(page, Page)
    page.goto("/api/docs")
    # Rendered from the OpenAPI document: the title and an operation of the API.
    # Generous waits: a 1.5 MB script and the OpenAPI document on a loaded machine.
    title = page.locator(".swagger-ui .info .title")
    expect(title).to_contain_text("gpuyard", timeout=60_000)
    operation = page.locator(".opblock-summary-path", has_text="/api/v1/jobs").first
    expect(operation).to_be_visible(timeout=30_000)
    assert refused == []
