"""The web UI's pages over HTTP, on both databases: sign-in, CSRF and origin checks,
escaping of what users wrote, the same permissions as the API, the list's filters in SQL."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from gpuyard.client import Client
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.testing.auth import TokenFor


@pytest.fixture
def web(api_url: str) -> httpx.Client:
    with httpx.Client(base_url=api_url, timeout=10, follow_redirects=False) as client:
        yield client  # type: ignore[misc]


def signed_in(web: httpx.Client, token: str) -> str:
    """Sign ``web`` in with ``token``; returns the CSRF token its forms carry."""
    answer = web.post("/login", data={"token": token, "next": "/jobs"})
    assert answer.status_code == 303, answer.text
    page = web.get("/jobs/new")
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found is not None
    return found.group(1)


def submit(client: Client, **spec: Any) -> int:
    return client.submit({"command": "python train.py", **spec}).id


def test_pages_need_a_sign_in_and_a_bad_token_is_refused(web: httpx.Client) -> None:
    for path in ("/jobs", "/jobs/new", "/nodes", "/pools", "/admin", "/jobs/1"):
        answer = web.get(path)
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/login?next=")
    refused = web.post("/login", data={"token": "gy_nope", "next": "/jobs"})
    assert refused.status_code == 401
    assert "unknown" in refused.text
    # The API does not take the cookie: it needs its bearer header.
    web.cookies.set("gpuyard_session", "gy_nope")
    assert web.get("/api/v1/jobs").status_code == 401


def test_sign_in_sets_a_strict_http_only_cookie_and_keeps_next_on_this_site(
    web: httpx.Client, token_for: TokenFor
) -> None:
    token = token_for("alice")
    for elsewhere in ("//evil.example/x", "/\t/evil.example", "/\\evil.example", "https://x"):
        answer = web.post("/login", data={"token": token, "next": elsewhere})
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/jobs?notice="), elsewhere
    kept = web.post("/login", data={"token": token, "next": "/jobs/7?worker=1"})
    assert kept.headers["location"].startswith("/jobs/7?worker=1&notice=")
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie


def test_a_form_without_the_csrf_token_or_from_another_origin_changes_nothing(
    web: httpx.Client, token_for: TokenFor, as_user: Any
) -> None:
    alice = as_user("alice")
    job = submit(alice)
    csrf = signed_in(web, token_for("alice"))
    assert web.post(f"/jobs/{job}/stop", data={}).status_code == 403
    other = web.post(
        f"/jobs/{job}/stop", data={"csrf": csrf}, headers={"Origin": "https://evil.example"}
    )
    assert other.status_code == 403
    assert alice.job(job).status.value == "queued"
    done = web.post(f"/jobs/{job}/stop", data={"csrf": csrf})
    assert done.status_code == 303
    assert alice.job(job).status.value == "stopped"


def test_what_users_wrote_is_escaped(web: httpx.Client, token_for: TokenFor, as_user: Any) -> None:
    alice = as_user("alice")
    job = submit(
        alice,
        command="echo '<script>alert(1)</script>'",
        env={"X": "<img src=x onerror=alert(2)>"},
    )
    signed_in(web, token_for("alice"))
    page = web.get(f"/jobs/{job}").text
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "<img src=x" not in page
    hostile = web.get("/jobs", params={"q": "<b>bold</b>"}).text
    assert "<b>bold</b>" not in hostile and "&lt;b&gt;bold&lt;/b&gt;" in hostile
    notice = web.get("/jobs", params={"notice": "<script>x</script>"}).text
    assert "<script>x</script>" not in notice
    assert "default-src 'self'" in web.get("/jobs").headers["content-security-policy"]


def test_a_read_only_viewer_sees_no_actions_and_is_refused(
    web: httpx.Client, token_for: TokenFor, as_user: Any
) -> None:
    alice = as_user("alice", group="lab")
    job = submit(alice, access="read-only")
    csrf = signed_in(web, token_for("bob", group="lab"))
    page = web.get(f"/jobs/{job}").text
    assert 'id="stop-job"' not in page and "Clone" in page
    refused = web.post(f"/jobs/{job}/stop", data={"csrf": csrf})
    assert refused.status_code == 403
    assert "read-only" in refused.text
    assert alice.job(job).status.value == "queued"
    # Someone outside the group does not even see it.
    signed_in(web, token_for("carol"))
    assert web.get(f"/jobs/{job}").status_code == 404
    assert "/jobs/" + str(job) not in web.get("/jobs").text


def test_admin_page_is_for_admins(web: httpx.Client, token_for: TokenFor) -> None:
    signed_in(web, token_for("alice"))
    assert web.get("/admin").status_code == 403
    csrf = signed_in(web, token_for("root", admin=True))
    page = web.get("/admin")
    assert page.status_code == 200 and "Audit trail" in page.text
    turned = web.post("/admin/sharing", data={"csrf": csrf, "sharing": "off"})
    assert turned.status_code == 303
    assert 'Sharing is <strong id="sharing-state">off' in web.get("/admin").text


def test_the_job_list_filters_sorts_and_pages_in_sql(
    web: httpx.Client, token_for: TokenFor, as_user: Any
) -> None:
    alice = as_user("alice")
    ids = [submit(alice, name=f"run-{i}", priority="low" if i % 2 else "normal") for i in range(7)]
    signed_in(web, token_for("alice"))
    page = web.get(
        "/jobs", params={"priority": "low", "mode": "single", "sort": "name", "order": "asc"}
    ).text
    shown = re.findall(r'<td class="name"><a href="/jobs/\d+">(run-\d)</a>', page)
    assert shown == ["run-1", "run-3", "run-5"]
    first = web.get("/jobs", params={"size": 25, "q": f"#{ids[2]}"}).text
    assert re.findall(r'<td class="name"><a href="/jobs/\d+">(run-\d)</a>', first) == ["run-2"]
    bad = web.get("/jobs", params={"since": "yesterday"})
    assert bad.status_code == 422 and "YYYY-MM-DD" in bad.text


def test_the_form_checks_with_the_spec_rules_and_predicts(
    web: httpx.Client, token_for: TokenFor
) -> None:
    csrf = signed_in(web, token_for("alice"))
    bad = web.post("/jobs/check", data={"csrf": csrf, "command": "KEY=1 python x.py"}).json()
    assert not bad["ok"] and "executable" in bad["errors"]["command"]
    good = web.post(
        "/jobs/check",
        data={
            "csrf": csrf,
            "command": "python x.py",
            "name": "form-job",
            "datasets_name": ["imagenet", ""],
            "datasets_path": ["/data/imagenet", ""],
            "alt_gpus": ["0", ""],
            "alt_cpus": ["2", ""],
            "alt_memory": ["", ""],
        },
    ).json()
    assert good["ok"], good
    assert "name: form-job" in good["yaml"] and "imagenet" in good["yaml"]
    assert good["prediction"]["reason"]
    made = web.post("/jobs/new", data={"csrf": csrf, "command": "python x.py", "name": "made"})
    assert made.status_code == 303 and re.match(r"/jobs/\d+\?notice=", made.headers["location"])
    again = web.post("/jobs/new", data={"csrf": csrf, "command": "KEY=1 x", "name": "bad"})
    assert again.status_code == 422 and "executable" in again.text
    in_image = {"csrf": csrf, "command": "python x.py", "image": "team/train:3", "shm_size": "8G"}
    imaged = web.post("/jobs/check", data=in_image).json()
    assert imaged["ok"] and "image: team/train:3" in imaged["yaml"], imaged
    assert "shm_size: 8589934592" in imaged["yaml"]
    refused = web.post("/jobs/new", data=in_image)  # this pool has no registry: it says so
    assert refused.status_code == 422 and "no image registry" in refused.text


def test_priority_and_runtime_change_from_the_job_page(
    web: httpx.Client, token_for: TokenFor, as_user: Any
) -> None:
    alice = as_user("alice")
    job = submit(alice)
    csrf = signed_in(web, token_for("alice"))
    page = web.get(f"/jobs/{job}").text
    assert f'action="/jobs/{job}/priority"' in page
    assert web.post(f"/jobs/{job}/priority", data={"csrf": csrf, "priority": "low"}).is_redirect
    assert web.post(f"/jobs/{job}/runtime", data={"csrf": csrf, "max_runtime": "3h"}).is_redirect
    view = alice.job(job)
    assert view.spec is not None
    assert (view.spec.priority.value, view.spec.max_runtime) == ("low", 3 * 3600)
    bad = web.post(f"/jobs/{job}/runtime", data={"csrf": csrf, "max_runtime": "soon"})
    assert bad.status_code == 422
    too_big = web.get("/jobs/99999999999999999999")
    assert too_big.status_code == 422 and "<!doctype html>" in too_big.text
    bulk = web.post("/jobs/bulk", data={"csrf": csrf, "ids": [str(job)], "action": "stop"})
    assert bulk.is_redirect and "stop%3A%201%20done" in bulk.headers["location"]
    assert alice.job(job).status.value == "stopped"


def test_a_web_session_is_a_token_of_its_own_that_sign_out_revokes(
    web: httpx.Client, api_url: str, token_for: TokenFor
) -> None:
    """Issue 24, point 9: the cookie was the raw API token, and sign-out left it valid."""
    token = token_for("alice")
    csrf = signed_in(web, token)
    cookie = web.cookies.get("gpuyard_session")
    assert cookie and cookie != token  # the session's own token, never the API token
    # The session signs in the web UI only, not the API.
    bearer = {"Authorization": f"Bearer {cookie}"}
    assert httpx.get(f"{api_url}/api/v1/jobs", headers=bearer).status_code == 401
    assert web.post("/logout", data={"csrf": csrf}).status_code == 303
    # A copy of the cookie kept from before signs no one in after sign-out.
    with httpx.Client(base_url=api_url, timeout=10, follow_redirects=False) as copy:
        copy.cookies.set("gpuyard_session", cookie)
        answer = copy.get("/jobs")
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/login")
    # The API token itself is untouched by the sign-out.
    assert Client(api_url, token=token).user_info().name == "alice"


def test_a_job_page_suspends_and_holds_then_releases_a_job(
    web: httpx.Client,
    token_for: TokenFor,
    as_user: Any,
    controller: Controller,
    fake_executor: FakeExecutor,
) -> None:
    alice = as_user("alice")
    job = submit(alice)
    controller.tick()
    csrf = signed_in(web, token_for("alice"))
    page = web.get(f"/jobs/{job}").text
    assert 'id="suspend-hold-job"' in page and 'id="hold-job"' not in page
    assert web.post(f"/jobs/{job}/suspend", data={"hold": "1"}).status_code == 403  # no CSRF
    done = web.post(f"/jobs/{job}/suspend", data={"csrf": csrf, "hold": "1"})
    assert done.status_code == 303, done.text
    assert (alice.job(job).state.value, alice.job(job).on_hold) == ("suspending", True)
    controller.tick()
    fake_executor.exit(job, code=75)
    for _ in range(3):
        controller.tick()
    assert (alice.job(job).state.value, alice.job(job).on_hold) == ("suspended", True)
    page = web.get(f"/jobs/{job}").text
    assert 'id="release-job"' in page and 'id="suspend-job"' not in page
    assert web.post(f"/jobs/{job}/release", data={"csrf": csrf}).status_code == 303
    controller.tick()
    assert (alice.job(job).state.value, alice.job(job).on_hold) == ("running", False)
    # Someone else's job is a missing one, for a hold as for the rest.
    theirs = signed_in(web, token_for("carol"))
    assert web.post(f"/jobs/{job}/suspend", data={"csrf": theirs}).status_code == 404
    assert not alice.job(job).on_hold


def test_a_job_page_holds_a_job_for_debugging_and_runs_it_again(
    web: httpx.Client, token_for: TokenFor, as_user: Any, controller: Controller
) -> None:
    """The exec buttons: hold a running job with its nodes, then its command again or the
    node check; a bad duration is a message, and another's job a missing one."""
    alice = as_user("alice")
    job = submit(alice)
    controller.tick()
    csrf = signed_in(web, token_for("alice"))
    page = web.get(f"/jobs/{job}").text
    assert 'id="exec-stop-job"' in page and 'id="exec-start-job"' not in page
    bad = web.post(f"/jobs/{job}/exec-stop", data={"csrf": csrf, "hold": "soon"})
    assert bad.status_code == 422 and "hold for" in bad.text
    assert web.post(f"/jobs/{job}/exec-stop", data={"hold": "10m"}).status_code == 403  # no CSRF
    done = web.post(f"/jobs/{job}/exec-stop", data={"csrf": csrf, "hold": "10m"})
    assert done.status_code == 303, done.text
    controller.tick()
    controller.tick()
    assert alice.job(job).state.value == "held"
    page = web.get(f"/jobs/{job}").text
    assert 'id="exec-start-job"' in page and 'id="exec-check-job"' in page
    checked = web.post(f"/jobs/{job}/exec-check", data={"csrf": csrf})
    assert checked.status_code == 303, checked.text
    # While the check runs, its command cannot start again: the exec service's rule, as a page.
    again = web.post(f"/jobs/{job}/exec-start", data={"csrf": csrf})
    assert again.status_code == 409 and "still run" in again.text
    theirs = signed_in(web, token_for("carol"))
    assert web.post(f"/jobs/{job}/exec-start", data={"csrf": theirs}).status_code == 404
