"""A path with a trailing slash too many (or one too few) is redirected with a path, never to
the host a request's ``Host`` header names (issue 24, point 11). Over real HTTP."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize(
    ("asked", "location"),
    [
        ("/api/v1/jobs/", "/api/v1/jobs"),
        ("/api/v1/jobs/?limit=5&status=queued", "/api/v1/jobs?limit=5&status=queued"),
        ("/nodes/", "/nodes"),
        ("/jobs/new/", "/jobs/new"),
    ],
)
def test_the_redirect_is_a_path_whatever_the_host_header_says(
    api_url: str, asked: str, location: str
) -> None:
    with httpx.Client(base_url=api_url, timeout=30, follow_redirects=False) as web:
        answer = web.get(asked, headers={"Host": "evil.example"})
    assert answer.status_code == 307, answer.text
    assert answer.headers["location"] == location
    assert "evil" not in answer.text


def test_a_path_no_route_takes_either_way_is_still_a_404(api_url: str) -> None:
    with httpx.Client(base_url=api_url, timeout=30, follow_redirects=False) as web:
        for path in ("/api/v1/nothing/", "/api/v1/nothing", "/static/nothing/"):
            answer = web.get(path, headers={"Host": "evil.example"})
            assert answer.status_code == 404, (path, answer.headers)
            assert "location" not in answer.headers


def test_following_the_redirect_reaches_the_route(api_url: str, token_for: object) -> None:
    token = token_for("alice")  # type: ignore[operator]
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=api_url, timeout=30, follow_redirects=True) as api:
        answer = api.get("/api/v1/jobs/", headers=headers)
    assert answer.status_code == 200 and answer.json()["total"] == 0
