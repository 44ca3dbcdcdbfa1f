"""Pushing, sharing and deleting images from the web UI's Images page, over HTTP with a real
registry (Debian's docker-registry, TLS, htpasswd), on both databases: the same catalogue
calls and rules as the API, the upload streamed under the same cap, every POST CSRF-checked,
and another user's private image refused as a missing one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuyard.settings import Settings
from gpuyard.testing.auth import TokenFor
from gpuyard.testing.browser import chromium, unavailable_reason
from gpuyard.testing.registry import (
    NODE_ARCH,
    TestRegistry,
    layout_archive,
    tar_layer,
    write_layout,
)

UPLOAD_MAX = 1 << 20


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("web-archives")
    write_layout(root / "layout", [tar_layer([("etc/web", b"web push\n")])], architecture=NODE_ARCH)
    return layout_archive(root / "layout", root / "oci.tar")


@pytest.fixture
def settings(tmp_path: Path, registry: TestRegistry) -> Settings:
    return registry.pool_settings(tmp_path / "home", image_upload_max=UPLOAD_MAX)


@pytest.fixture
def web(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=30, follow_redirects=False) as client:
        yield client


def _sign_in(web: httpx.Client, token: str) -> str:
    """Sign in; the Images page's CSRF token."""
    assert web.post("/login", data={"token": token, "next": "/images"}).is_redirect
    found = re.search(r'data-csrf="([0-9a-f]+)"', web.get("/images").text)
    assert found
    return found[1]


def _push(web: httpx.Client, csrf: str, body: bytes, **params: str) -> httpx.Response:
    headers = {"X-Gpuyard-CSRF": csrf, "Content-Type": "application/octet-stream"}
    return web.post("/images/push", params=params, content=body, headers=headers)


def _names(page: str) -> list[str]:
    return re.findall(r'<th scope="row"><code>([^<]+)</code>', page)


def _error(answer: httpx.Response) -> str:
    found = re.search(r'<p class="error" role="alert">([^<]*)</p>', answer.text)
    assert found, answer.text
    return found[1]


def _nothing_left(settings: Settings) -> None:
    uploads = settings.home / "uploads"
    assert not uploads.exists() or list(uploads.iterdir()) == []


def test_an_image_is_pushed_shared_and_deleted_from_the_page(
    web: httpx.Client, token_for: TokenFor, archive: Path, settings: Settings
) -> None:
    bob_token = token_for("bob", group="ops")
    csrf = _sign_in(web, token_for("alice", group="lab"))
    pushed = _push(web, csrf, archive.read_bytes(), name="webx:1", description="<b>d</b>")
    assert pushed.status_code == 200, pushed.text
    assert pushed.json()["name"] == "alice/webx:1"
    assert web.get(pushed.json()["next"]).status_code == 200
    page = web.get("/images").text
    assert _names(page) == ["alice/webx:1"]
    assert "&lt;b&gt;d&lt;/b&gt;" in page and 'value="official"' not in page  # not an admin's
    _nothing_left(settings)
    bob_csrf = _sign_in(web, bob_token)
    assert _names(web.get("/images").text) == []
    # Bob may not change it, and is told so as if it did not exist.
    for route, extra in (("share", {"visibility": "public"}), ("delete", {})):
        hidden = web.post(
            f"/images/{route}", data={"csrf": bob_csrf, "name": "alice/webx:1", **extra}
        )
        missing = web.post(
            f"/images/{route}", data={"csrf": bob_csrf, "name": "alice/nox:1", **extra}
        )
        assert hidden.status_code == missing.status_code == 404
        assert _error(hidden).replace("webx", "nox") == _error(missing)
    csrf = _sign_in(web, token_for("alice", group="lab"))
    shared = web.post(
        "/images/share", data={"csrf": csrf, "name": "alice/webx:1", "visibility": "public"}
    )
    assert shared.status_code == 303 and "public" in shared.headers["location"]
    refused = web.post(
        "/images/share", data={"csrf": csrf, "name": "alice/webx:1", "visibility": "official"}
    )
    assert refused.status_code == 403, refused.text  # official is for admins only
    _sign_in(web, bob_token)
    assert _names(web.get("/images").text) == ["alice/webx:1"]
    root_csrf = _sign_in(web, token_for("root", admin=True))
    assert 'value="official"' in web.get("/images").text
    made = {"csrf": root_csrf, "name": "alice/webx:1", "visibility": "official"}
    assert web.post("/images/share", data=made).status_code == 303
    assert "<td>official</td>" in web.get("/images").text
    csrf = _sign_in(web, token_for("alice", group="lab"))
    gone = web.post("/images/delete", data={"csrf": csrf, "name": "alice/webx:1"})
    assert gone.status_code == 303
    assert _names(web.get("/images").text) == []


def test_a_post_without_the_pages_csrf_token_or_from_another_site_is_refused(
    web: httpx.Client, token_for: TokenFor, archive: Path, settings: Settings
) -> None:
    csrf = _sign_in(web, token_for("alice"))
    assert _push(web, "", archive.read_bytes(), name="webc:1").status_code == 403
    other = {"X-Gpuyard-CSRF": csrf, "Origin": "https://evil.example"}
    assert (
        web.post(
            "/images/push", params={"name": "webc:1"}, content=archive.read_bytes(), headers=other
        ).status_code
        == 403
    )
    assert (
        web.post("/images/share", data={"name": "alice/webc:1", "visibility": "public"}).status_code
        == 403
    )
    assert web.post("/images/delete", data={"name": "alice/webc:1"}).status_code == 403
    assert _names(web.get("/images").text) == []
    _nothing_left(settings)


def test_a_bad_push_is_the_pages_error_and_records_nothing(
    web: httpx.Client, token_for: TokenFor, archive: Path, settings: Settings
) -> None:
    csrf = _sign_in(web, token_for("alice"))
    bad = _push(web, csrf, b"not a tar archive at all", name="webbad:1")
    assert bad.status_code == 422, bad.text
    other = _push(web, csrf, archive.read_bytes(), name="bob/webbad:1")
    assert other.status_code == 422 and "not bob/webbad" in _error(other)
    large = _push(web, csrf, b"\0" * (UPLOAD_MAX + 1), name="webbig:1")
    assert large.status_code == 413 and "GPUYARD_IMAGE_UPLOAD_MAX" in _error(large)

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused as the bytes arrive
        for _ in range(4):
            yield b"\0" * (UPLOAD_MAX // 2)

    headers = {"X-Gpuyard-CSRF": csrf}
    streamed = web.post(
        "/images/push", params={"name": "webbig:2"}, content=chunks(), headers=headers
    )
    assert streamed.status_code == 413, streamed.text
    assert _names(web.get("/images").text) == []
    _nothing_left(settings)


def test_the_pages_script_pushes_the_chosen_file_and_shows_a_refusal(
    api_url: str, token_for: TokenFor, archive: Path
) -> None:
    """In a real browser: the upload form's script sends the file and lands on the list, and
    a refused push is the form's error message."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no browser: {reason}")
    from playwright.sync_api import expect

    with chromium() as browser:
        context = browser.new_context(base_url=api_url)
        context.set_default_timeout(20_000)
        page = context.new_page()
        page.goto("/login?next=/images")
        page.get_by_label("Token").fill(token_for("alice"))
        page.get_by_role("button", name="Sign in").click()
        form = page.locator("#image-push")
        form.get_by_label("Archive").set_input_files(str(archive))
        form.get_by_label("Name").fill("bob/webjs:1")
        form.get_by_role("button", name="Push").click()
        expect(page.locator("#image-push-error")).to_contain_text("not bob/webjs")
        form.get_by_label("Name").fill("webjs:1")
        form.get_by_role("button", name="Push").click()
        expect(page.locator(".notice")).to_contain_text("pushed alice/webjs:1 (private)")
        expect(page.locator('th[scope="row"] code')).to_have_text(["alice/webjs:1"])
        context.close()
