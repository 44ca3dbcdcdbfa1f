"""Registry logins over the real HTTP API and a real registry (Debian's docker-registry, TLS,
htpasswd users alice and bob), on both databases (issue 26: "Registry credentials a user gives
for an external registry are stored encrypted, never logged, never shown back, and reach only
that user's pulls"). The registry copied from is the test registry itself."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select, update

from gpuyard.errors import Conflict, GpuyardError, InvalidSpec, NotFound, PermissionDenied
from gpuyard.models.image import ImageRef
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.store.tables import Base, RegistryLoginRow
from gpuyard.testing.auth import AsUser
from gpuyard.testing.registry import NODE_ARCH, TestRegistry, tar_layer, write_layout

DOWN = "127.0.0.1:1"
"""A listed source where nothing listens."""


@pytest.fixture
def settings(tmp_path: Path, registry: TestRegistry) -> Settings:
    return registry.pool_settings(
        tmp_path / "home", image_sources=[registry.host, DOWN], image_sources_ca=registry.ca_file
    )


@pytest.fixture(scope="module")
def source(registry: TestRegistry, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image in the source registry, pushed there by its user bob: HOST/ext/logins:1."""
    layout = tmp_path_factory.mktemp("source") / "layout"
    write_layout(layout, [tar_layer([("etc/logins", b"x\n")])], architecture=NODE_ARCH)
    with registry.client("bob") as client:
        client.push(layout, ImageRef.parse("ext/logins:1"))
    return f"{registry.host}/ext/logins:1"


def _everything_stored(store: Store) -> str:
    """Every row of every table, as text."""
    with store.read() as session:
        return "\n".join(
            repr(tuple(row))
            for table in Base.metadata.sorted_tables
            for row in session.execute(select(table))
        )


def test_a_login_is_checked_kept_sealed_and_used_by_its_owner_only(
    as_user: AsUser,
    registry: TestRegistry,
    source: str,
    store: Store,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    host, password = registry.host, registry.users["bob"]
    alice, bob = as_user("alice"), as_user("bob")
    headers = {"Authorization": f"Bearer {alice.token}"}
    body = {"username": "bob", "password": password}
    put = httpx.put(f"{alice.url}/api/v1/registry-logins/{host}", json=body, headers=headers)
    assert put.status_code == 200, put.text
    listed = httpx.get(f"{alice.url}/api/v1/registry-logins", headers=headers)
    for answer in (put, listed):
        assert password not in answer.text
    [saved] = alice.registry_logins()
    assert (saved.host, saved.username) == (host, "bob")
    assert put.json()["host"] == host and "password" not in put.json()
    assert bob.registry_logins() == []

    copied = alice.copy_image(source, "from-login:1")  # no credentials: alice's saved login
    assert copied.name == "alice/from-login:1"
    with pytest.raises(PermissionDenied, match=f"registry {host} refused access"):
        bob.copy_image(source, "from-login:1")  # alice's login is not bob's
    with pytest.raises(NotFound):
        bob.delete_registry_login(host)
    assert len(alice.registry_logins()) == 1

    stored = _everything_stored(store)
    assert password not in stored and "bob" in stored
    messages = [record.getMessage() for record in caplog.records]
    assert any(f"{host}/v2/" in message for message in messages)  # the server's own requests
    assert not any(password in message for message in messages)

    alice.delete_registry_login(host)
    assert alice.registry_logins() == []
    with pytest.raises(NotFound, match="no saved login"):
        alice.delete_registry_login(host)
    with pytest.raises(PermissionDenied):
        alice.copy_image(source, "from-login:2")


def test_a_refused_unlisted_or_unreachable_login_is_not_kept(
    as_user: AsUser, registry: TestRegistry, store: Store
) -> None:
    host, alice = registry.host, as_user("alice")
    with pytest.raises(PermissionDenied, match="refused the login of bob") as refused:
        alice.save_registry_login(host, username="bob", password="wrong-pw")
    assert "wrong-pw" not in refused.value.detail
    with pytest.raises(InvalidSpec, match="not one this pool copies images from"):
        alice.save_registry_login("elsewhere.example:5000", username="bob", password="pw")
    headers = {"Authorization": f"Bearer {alice.token}"}
    down = httpx.put(
        f"{alice.url}/api/v1/registry-logins/{DOWN}",
        json={"username": "bob", "password": "pw"},
        headers=headers,
    )
    assert down.status_code == 503 and "cannot be reached" in down.json()["detail"]
    too_long = "p" * 4097
    for password in (too_long, 12345):  # refused values are not repeated back
        invalid = httpx.put(
            f"{alice.url}/api/v1/registry-logins/{host}",
            json={"username": "bob", "password": password},
            headers=headers,
        )
        assert invalid.status_code == 422 and "password" in invalid.json()["detail"]
        assert str(password) not in invalid.text
    assert alice.registry_logins() == []
    with store.read() as session:
        assert session.scalars(select(RegistryLoginRow)).all() == []


def test_a_sealed_password_opens_only_for_its_owner_and_key(
    as_user: AsUser,
    registry: TestRegistry,
    source: str,
    store: Store,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another key (the key file replaced) or a sealed password moved to another user's row:
    a clear error saying to save the login again, never the password."""
    host, password = registry.host, registry.users["bob"]
    alice, carol = as_user("alice"), as_user("carol")
    alice.save_registry_login(host, username="bob", password=password)
    carol.save_registry_login(host, username="alice", password=registry.users["alice"])
    with store.write() as session:
        sealed = session.get(RegistryLoginRow, ("alice", host))
        assert sealed is not None
        session.execute(
            update(RegistryLoginRow)
            .where(RegistryLoginRow.owner == "carol")
            .values(ciphertext=sealed.ciphertext, username="bob")
        )
    with pytest.raises(Conflict, match="save it again") as moved:
        carol.copy_image(source, "moved:1")
    assert password not in moved.value.detail

    key_file = settings.resolved_secrets_key_file
    assert key_file.stat().st_mode & 0o777 == 0o600
    key_file.write_bytes(Fernet.generate_key())
    with pytest.raises(Conflict, match=f"gpuyard images login {host}"):
        alice.copy_image(source, "rekeyed:1")
    alice.save_registry_login(host, username="bob", password=password)  # sealed anew
    assert alice.copy_image(source, "rekeyed:1").name == "alice/rekeyed:1"

    key_file.write_text("not a key\n")
    with pytest.raises(GpuyardError, match="ask an admin") as broken:
        alice.save_registry_login(host, username="bob", password=password)
    assert password not in broken.value.detail and str(key_file) not in broken.value.detail
    assert f"{key_file} does not hold a key" in caplog.text  # the admin's reason, in the log
