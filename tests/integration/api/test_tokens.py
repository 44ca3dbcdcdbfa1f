"""Signing in with API tokens over real HTTP: stored hashed, expiring, listed and revoked, the
pool owner's token made by `gpuyard up`'s start-up step, and the network defaults."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict, InvalidSpec, NotFound, PermissionDenied, Unauthenticated
from gpuyard.executors.fake import FakeExecutor
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.store.tables import TokenRow
from gpuyard.testing.auth import AsUser, TokenFor
from gpuyard.up import check_exposure, ensure_owner_token


def test_tokens_are_stored_hashed_expire_and_can_be_revoked(
    api_url: str, as_user: AsUser, token_for: TokenFor, store: Store, clock: ManualClock
) -> None:
    admin = as_user("ada", admin=True)
    admin.create_user("bob")
    issued = admin.create_token(user="bob", label="laptop", expires_in="1d")
    assert issued.token.startswith("gy_") and len(issued.token) > 40
    with store.read() as session:
        digests = session.scalars(select(TokenRow.digest)).all()
    assert issued.token not in digests  # only its SHA-256 is kept
    bob = Client(api_url, token=issued.token)
    assert bob.user_info().name == "bob"
    listed = {t.id: t for t in bob.tokens()}
    assert listed[issued.id].label == "laptop" and listed[issued.id].last_used_at is not None
    assert "token" not in listed[issued.id].model_dump()

    # Bob may make tokens for himself, not for others, nor list others'.
    mine = bob.create_token(label="ci")
    with pytest.raises(PermissionDenied, match="only admins may create tokens for others"):
        bob.create_token(user="ada")
    with pytest.raises(PermissionDenied):
        bob.tokens(user="ada")
    # Another user's token id is as unknown as one that does not exist.
    ada_token = admin.tokens()[0].id
    with pytest.raises(NotFound, match=f"token {ada_token} does not exist"):
        bob.revoke_token(ada_token)

    bob.revoke_token(mine.id)
    with pytest.raises(Unauthenticated, match="unknown or was revoked"):
        Client(api_url, token=mine.token).user_info()
    clock.advance(86400 + 1)
    with pytest.raises(Unauthenticated, match="expired"):
        bob.user_info()
    trail = [(e.action, e.target) for e in admin.audit()]
    assert ("token.create", "user:bob") in trail and ("token.revoke", "user:bob") in trail


@pytest.mark.parametrize(
    ("header", "says"),
    [
        (None, "sign in first"),
        ("Basic Ym9iOnNlY3JldA==", "must be `Bearer <token>`"),
        ("Bearer", "must be `Bearer <token>`"),
        ("Bearer gy_" + "x" * 300, "not a gpuyard token"),
        ("Bearer gy_nope", "unknown or was revoked"),
    ],
)
def test_requests_without_a_valid_token_get_401(
    api_url: str, header: str | None, says: str
) -> None:
    headers = {"Authorization": header} if header is not None else {}
    with httpx.Client(base_url=f"{api_url}/api/v1", headers=headers, timeout=60) as http:
        for method, path in [("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/nodes")]:
            response = http.request(method, path, json={"command": "x"})
            assert response.status_code == 401, response.text
            assert response.json()["code"] == "unauthenticated"
            assert says in response.json()["detail"]
        assert http.get("/health").status_code == 200  # monitors have no token


def test_token_specs_are_checked(as_user: AsUser) -> None:
    admin = as_user("ada", admin=True)
    with pytest.raises(InvalidSpec, match="expires_in"):
        admin.create_token(expires_in="400d")
    with pytest.raises(NotFound, match="user nobody does not exist"):
        admin.create_token(user="nobody")


def test_the_pool_owner_token_is_made_once_and_kept_private(
    tmp_path: Path, app: Any, settings: Settings
) -> None:
    tokens = app.state.services.tokens
    ensure_owner_token(settings, tokens)
    path = settings.owner_token_file
    first = path.read_text().strip()
    assert path.stat().st_mode & 0o777 == 0o600
    assert tokens.valid(first) == settings.user
    ensure_owner_token(settings, tokens)
    assert path.read_text().strip() == first  # still valid: kept
    path.write_text("gy_forged\n")
    ensure_owner_token(settings, tokens)
    assert path.read_text().strip() not in ("gy_forged", first)


def test_a_non_loopback_address_needs_tls_or_insecure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert check_exposure(Settings(home=tmp_path, host="127.0.0.1")) is False
    assert check_exposure(Settings(home=tmp_path, host="::1")) is False
    assert check_exposure(Settings(home=tmp_path, host="localhost")) is False
    with pytest.raises(InvalidSpec, match=r"refusing to serve plain HTTP on 0\.0\.0\.0"):
        check_exposure(Settings(home=tmp_path, host="0.0.0.0"))  # noqa: S104
    assert check_exposure(Settings(home=tmp_path, host="10.1.2.3", insecure=True)) is False
    assert "clear text" in caplog.text
    with pytest.raises(InvalidSpec, match="both --tls-cert and --tls-key"):
        check_exposure(Settings(home=tmp_path, host="10.1.2.3", tls_cert=tmp_path / "c"))
    with pytest.raises(InvalidSpec, match="does not exist"):
        check_exposure(
            Settings(home=tmp_path, host="10.1.2.3", tls_cert=tmp_path / "c", tls_key=tmp_path)
        )
    (tmp_path / "c.pem").write_text("cert")
    (tmp_path / "k.pem").write_text("key")
    tls = Settings(host="10.1.2.3", tls_cert=tmp_path / "c.pem", tls_key=tmp_path / "k.pem")
    assert check_exposure(tls) is True


def test_a_user_cannot_pile_up_tokens_and_expired_ones_are_dropped(
    as_user: AsUser, clock: ManualClock, store: Store
) -> None:
    bob = as_user("bob")  # one token already: the fixture's
    for _ in range(98):
        bob.create_token(expires_in="1h")
    bob.create_token(expires_in="30d")  # the 100th
    with pytest.raises(Conflict, match="bob has 100 tokens"):
        bob.create_token()
    clock.advance(2 * 3600)  # the 98 short ones expire (the fixture's lasts a year)
    bob.create_token()
    with store.read() as session:
        held = session.scalars(select(TokenRow).where(TokenRow.user_name == "bob")).all()
    assert len(held) == 3


def test_a_token_made_with_a_token_never_outlives_it_and_goes_with_it(
    api_url: str, as_user: AsUser, clock: ManualClock
) -> None:
    """Issue 24, point 9: a 2-second token minted a 366-day token that outlived it."""
    admin = as_user("ada", admin=True)
    admin.create_user("bob")
    short = admin.create_token(user="bob", label="short", expires_in=60)
    bob = Client(api_url, token=short.token)
    child = bob.create_token(label="long", expires_in="366d")
    assert child.expires_at == short.expires_at  # cut short to its parent's
    assert child.parent == short.id
    grandchild = Client(api_url, token=child.token).create_token(label="deeper")
    assert grandchild.parent == child.id and grandchild.expires_at == short.expires_at
    # Revoking the parent revokes every token made with it, all the way down.
    admin.revoke_token(short.id)
    for gone in (short, child, grandchild):
        with pytest.raises(Unauthenticated, match="unknown or was revoked"):
            Client(api_url, token=gone.token).user_info()
    # And an expired parent's children have expired with it.
    parent = admin.create_token(user="bob", expires_in=60)
    kid = Client(api_url, token=parent.token).create_token(expires_in="30d")
    clock.advance(61)
    with pytest.raises(Unauthenticated, match="expired"):
        Client(api_url, token=kid.token).user_info()


def test_a_log_stream_ends_when_its_token_is_revoked(
    api_url: str, as_user: AsUser, store: Store, clock: ManualClock, fake_executor: FakeExecutor
) -> None:
    """Issue 24, point 9: `logs?follow` kept streaming after its token was revoked."""
    controller = Controller(store, fake_executor, clock=clock)
    controller.register_nodes()
    alice = as_user("alice")
    job_id = alice.submit({"command": "sleep 100"}).id
    controller.tick()
    fake_executor.write_log(job_id, b"step 1\n")
    made = alice.create_token(label="follow")
    stream = Client(api_url, token=made.token).follow_logs(job_id)
    got: list[bytes] = []
    ended = threading.Event()

    def read() -> None:
        for data in stream:
            got.append(data)
        ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not got:
        assert time.monotonic() < deadline, "the stream sent nothing"
        time.sleep(0.05)
    assert not ended.is_set()  # the job runs: the stream stays open
    alice.revoke_token(made.id)
    assert ended.wait(60), "the stream went on after its token was revoked"
    assert b"".join(got) == b"step 1\n"
    assert alice.job(job_id).state.value == "running"  # the job itself goes on
