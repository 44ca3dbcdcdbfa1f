"""The web UI's Datasets page over HTTP, on both databases: what the catalogue's rule lets the
signed-in user see, filtered as asked, with versions, sizes and states, what users wrote
escaped; favourites, sharing and deleting through the service's rules (another user's
private dataset answered as a missing one)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from gpuyard.models.dataset import DatasetVisibility, VersionState
from gpuyard.store.engine import Store
from gpuyard.store.tables import DatasetRow, DatasetVersionRow
from gpuyard.testing.auth import TokenFor


@pytest.fixture
def web(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=10, follow_redirects=False) as client:
        yield client


def _add(store: Store, owner: str, name: str, visibility: DatasetVisibility, **more: str) -> None:
    with store.write() as session:
        row = DatasetRow(
            owner=owner,
            name=name,
            visibility=visibility,
            description=more.get("description", ""),
            created_at=1.0,
        )
        session.add(row)
        session.flush()
        for version, state in enumerate((VersionState.READY, VersionState.HASHING), start=1):
            session.add(
                DatasetVersionRow(
                    dataset_id=row.id,
                    version=version,
                    state=state,
                    source="path",
                    path=f"/data/{name}",
                    size=3 << 20,
                    files=7,
                    created_by=owner,
                    created_at=1.0,
                )
            )


def _names(page: str) -> list[str]:
    return re.findall(r'<th scope="row"><code>([^<]+)</code>', page)


def _sign_in(web: httpx.Client, token: str) -> str:
    assert web.post("/login", data={"token": token, "next": "/datasets"}).is_redirect
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', web.get("/datasets").text)
    assert found is not None
    return found.group(1)


def test_the_datasets_page_shows_what_the_caller_may_use_and_changes_through_the_rules(
    web: httpx.Client, store: Store, token_for: TokenFor
) -> None:
    assert web.get("/datasets").status_code == 303  # sign in first
    _add(store, "alice", "mine", DatasetVisibility.PRIVATE, description="<b>x</b>")
    _add(store, "alice", "open", DatasetVisibility.PUBLIC)
    bob = _sign_in(web, token_for("bob"))
    page = web.get("/datasets").text
    assert _names(page) == ["alice/open"]
    assert 'href="/datasets" aria-current="page"' in page
    assert "@1</code> ready, 3.0 MiB, 7 files" in page and "@2</code> hashing" in page
    assert _names(web.get("/datasets", params={"filter": "mine"}).text) == []
    # Bob may not change alice's private one, and is told so as if it did not exist.
    for route, extra in (("share", {"visibility": "public"}), ("delete", {}), ("favourite", {})):
        hidden = web.post(f"/datasets/{route}", data={"csrf": bob, "name": "alice/mine", **extra})
        missing = web.post(f"/datasets/{route}", data={"csrf": bob, "name": "alice/nope", **extra})
        assert hidden.status_code == missing.status_code == 404
    faved = web.post("/datasets/favourite", data={"csrf": bob, "name": "alice/open", "on": "1"})
    assert faved.status_code == 303
    assert _names(web.get("/datasets", params={"filter": "favourites"}).text) == ["alice/open"]
    refused = web.post("/datasets/delete", data={"csrf": bob, "name": "alice/open"})
    assert refused.status_code == 403

    alice = _sign_in(web, token_for("alice"))
    mine = web.get("/datasets").text
    assert _names(mine) == ["alice/mine", "alice/open"]
    assert "&lt;b&gt;x&lt;/b&gt;" in mine and "<b>x</b>" not in mine
    shared = web.post(
        "/datasets/share", data={"csrf": alice, "name": "alice/mine", "visibility": "mine"}
    )
    assert shared.status_code == 303 and "private" in shared.headers["location"]
    gone = web.post("/datasets/delete", data={"csrf": alice, "name": "alice/open"})
    assert gone.status_code == 303
    assert _names(web.get("/datasets").text) == ["alice/mine"]
