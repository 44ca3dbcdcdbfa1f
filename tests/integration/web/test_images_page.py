"""The web UI's Images page over HTTP, on both databases: what the catalogue's rule lets the
signed-in user see, filtered as asked, with what users wrote escaped."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from gpuyard.models.image_catalogue import ImageScope, ImageVisibility
from gpuyard.store.engine import Store
from gpuyard.store.tables import ImageRow
from gpuyard.testing.auth import TokenFor


@pytest.fixture
def web(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=10, follow_redirects=False) as client:
        yield client


def _add(store: Store, name: str, owner: str, visibility: ImageVisibility, **more: object) -> None:
    repository, tag = name.split(":")
    with store.write() as session:
        session.add(
            ImageRow(
                repository=repository,
                tag=tag,
                digest="sha256:" + "a" * 64,
                owner=owner,
                visibility=visibility,
                scope=more.get("scope", ImageScope.TRAINING),
                accelerator=more.get("accelerator", ""),
                description=more.get("description", ""),
                size=3 << 20,
                pushed_by=owner,
                pushed_at=1.0,
            )
        )


def _names(page: str) -> list[str]:
    return re.findall(r'<th scope="row"><code>([^<]+)</code>', page)


def test_the_images_page_shows_what_the_caller_may_use(
    web: httpx.Client, store: Store, token_for: TokenFor
) -> None:
    assert web.get("/images").status_code == 303  # sign in first
    _add(store, "alice/mine:1", "alice", ImageVisibility.PRIVATE, description="<b>x</b>")
    _add(store, "alice/shared:1", "alice", ImageVisibility.PUBLIC, scope=ImageScope.DEVELOPMENT)
    _add(store, "official/base:1", "root", ImageVisibility.OFFICIAL, accelerator="H200")
    token_for("root", admin=True)
    assert web.post("/login", data={"token": token_for("bob"), "next": "/images"}).is_redirect
    seen = web.get("/images")
    assert seen.status_code == 200
    assert _names(seen.text) == ["alice/shared:1", "official/base:1"]
    assert _names(web.get("/images", params={"scope": "development"}).text) == ["alice/shared:1"]
    only = web.get("/images", params={"accelerator": "A100"}).text
    assert _names(only) == ["alice/shared:1"]  # built for any accelerator
    assert web.post("/login", data={"token": token_for("alice"), "next": "/images"}).is_redirect
    mine = web.get("/images").text
    assert _names(mine) == ["alice/mine:1", "alice/shared:1", "official/base:1"]
    assert "&lt;b&gt;x&lt;/b&gt;" in mine and "<b>x</b>" not in mine


def test_the_job_forms_image_picker_offers_the_training_images_the_caller_may_use(
    web: httpx.Client, store: Store, token_for: TokenFor
) -> None:
    _add(store, "alice/mine:1", "alice", ImageVisibility.PRIVATE, description="<i>y</i>")
    _add(store, "alice/dev:1", "alice", ImageVisibility.PUBLIC, scope=ImageScope.DEVELOPMENT)
    _add(store, "official/base:1", "root", ImageVisibility.OFFICIAL, accelerator="H200")
    assert web.post("/login", data={"token": token_for("bob"), "next": "/jobs/new"}).is_redirect
    offered = re.findall(r'<option value="([^"]+)">', web.get("/jobs/new").text)
    assert offered == ["official/base:1"]  # not alice's private one, not a development image
    assert web.post("/login", data={"token": token_for("alice"), "next": "/jobs/new"}).is_redirect
    form = web.get("/jobs/new").text
    assert re.findall(r'<option value="([^"]+)">', form) == ["alice/mine:1", "official/base:1"]
    assert "&lt;i&gt;y&lt;/i&gt;" in form and "<i>y</i>" not in form
