"""The registry client's auth flows and error mapping, on httpx's in-process transport: the
bearer-token challenge (the real test registry speaks basic auth only) and what a registry
sends back that must not leak credentials or pass unverified."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Iterator

import httpx
import pytest

from gpuyard.images.errors import (
    DigestMismatch,
    ImageError,
    RegistryUnavailable,
    Unauthorized,
    WrongArchitecture,
)
from gpuyard.images.registry import Credentials, RegistryClient
from gpuyard.models.image import ImageRef, MediaType

SECRET = "s3cret-password"
BASIC = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
CONFIG = json.dumps({"architecture": "amd64", "os": "linux", "config": {}}).encode()
CONFIG_DIGEST = "sha256:" + hashlib.sha256(CONFIG).hexdigest()
MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "config": {"mediaType": MediaType.OCI_CONFIG, "digest": CONFIG_DIGEST, "size": len(CONFIG)},
        "layers": [],
    }
).encode()
MANIFEST_DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


class TokenRegistry:
    """A registry that wants a bearer token from its realm, which wants basic auth."""

    def __init__(self, realm: str = "https://auth.example/token") -> None:
        self.realm = realm
        self.token_requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            self.token_requests.append(request)
            if request.headers.get("authorization") != BASIC:
                return httpx.Response(401)
            return httpx.Response(200, json={"token": "tok-123"})
        if request.headers.get("authorization") != "Bearer tok-123":
            challenge = f'Bearer realm="{self.realm}",service="reg",scope="repository:a/b:pull"'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        if request.url.path.endswith(f"/blobs/{CONFIG_DIGEST}"):
            return httpx.Response(200, content=CONFIG)
        headers = {"Content-Type": MediaType.OCI_MANIFEST}
        return httpx.Response(200, content=MANIFEST, headers=headers)


def client(handler: object, password: str = SECRET) -> RegistryClient:
    return RegistryClient(
        "https://reg.example",
        credentials=Credentials("alice", password),
        transport=httpx.MockTransport(handler),  # type: ignore[arg-type]
        architecture="amd64",
    )


def test_the_bearer_flow_gets_a_token_once_and_reuses_it() -> None:
    registry = TokenRegistry()
    with client(registry) as registry_client:
        ref = ImageRef.parse("a/b:1")
        assert registry_client.resolve(ref) == MANIFEST_DIGEST
        image = registry_client.image(ref.pinned(MANIFEST_DIGEST))
        assert registry_client.config(ref, image.manifest).architecture == "amd64"
    [token_request] = registry.token_requests
    assert token_request.url.params["scope"] == "repository:a/b:pull"
    assert token_request.url.params["service"] == "reg"


def test_wrong_credentials_are_refused_and_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with client(TokenRegistry(), password="wrong-" + SECRET) as registry_client:
        with pytest.raises(Unauthorized) as refused:
            registry_client.resolve(ImageRef.parse("a/b:1"))
        shown = str(refused.value) + repr(registry_client) + caplog.text
    assert SECRET not in shown and "alice" not in str(refused.value)
    assert str(Credentials("alice", SECRET)) == "Credentials(<hidden>)"


def test_credentials_are_not_sent_to_a_plain_http_realm_elsewhere() -> None:
    registry = TokenRegistry(realm="http://evil.example/token")
    with client(registry) as registry_client, pytest.raises(Unauthorized, match="not sent"):
        registry_client.resolve(ImageRef.parse("a/b:1"))
    assert registry.token_requests == []


def test_a_manifest_that_does_not_match_its_pinned_digest_is_refused() -> None:
    other = "sha256:" + "0" * 64
    with client(TokenRegistry()) as registry_client, pytest.raises(DigestMismatch, match=other):
        registry_client.image(ImageRef.parse("a/b:1").pinned(other))


def test_a_config_for_another_architecture_is_refused() -> None:
    registry_client = client(TokenRegistry())
    registry_client.architecture = "arm64"
    with registry_client, pytest.raises(WrongArchitecture, match="linux/arm64"):
        ref = ImageRef.parse("a/b:1")
        registry_client.config(ref, registry_client.image(ref).manifest)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, RegistryUnavailable),
        (503, RegistryUnavailable),
        (429, RegistryUnavailable),
        (400, ImageError),
    ],
)
def test_server_errors_are_typed(status: int, error: type[Exception]) -> None:
    failing = client(lambda request: httpx.Response(status))
    with failing, pytest.raises(error, match=str(status)):
        failing.resolve(ImageRef.parse("a/b:1"))


def test_a_manifest_that_is_not_json_is_an_image_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"<html>", headers={"Content-Type": "text/html"})

    with client(handler) as registry_client, pytest.raises(ImageError, match="cannot be read"):
        registry_client.resolve(ImageRef.parse("a/b:1"))


def test_an_oversized_manifest_is_refused_without_reading_it_all() -> None:
    sent = []

    def endless() -> Iterator[bytes]:
        for _ in range(1000):
            sent.append(1)
            yield b"x" * (1 << 20)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())

    with client(handler) as registry_client, pytest.raises(ImageError, match="larger than"):
        registry_client.resolve(ImageRef.parse("a/b:1"))
    assert len(sent) < 10


def test_a_reference_to_another_registry_is_refused_before_any_request() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request may be sent")

    with client(handler) as registry_client, pytest.raises(ImageError, match=r"other\.example"):
        registry_client.resolve(ImageRef.parse("other.example/a/b:1"))
    with client(TokenRegistry()) as registry_client:
        assert registry_client.resolve(ImageRef.parse("reg.example/a/b:1")) == MANIFEST_DIGEST
