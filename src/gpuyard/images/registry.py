"""An OCI distribution (registry v2) client over httpx: resolve, fetch, verify, push.

One client talks to one registry (``base_url``); the caller picks the client for an
``ImageRef``'s registry. TLS is verified by default, against ``ca_file`` when given.
Credentials go as HTTP basic auth, or are traded for a bearer token when the registry answers
``401`` with ``WWW-Authenticate: Bearer realm=…`` (the distribution token flow); they are sent
to a token realm only over https or to the registry's own origin, and they never appear in an
error message, a log line or a repr.

Every byte fetched is checked against its digest: manifests and configs in memory, blobs while
they are written (a mismatch deletes the partial file and names the layer). ``resolve`` reads
an image index and picks ``linux`` and the node's architecture. ``push`` uploads an OCI image
layout directory (blobs by monolithic upload, skipping those the registry has, then the
manifest). docs/images.md#the-registry-client.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import platform
import re
import ssl
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gpuyard.images.errors import (
    DigestMismatch,
    ImageError,
    ImageNotFound,
    RegistryUnavailable,
    Unauthorized,
    WrongArchitecture,
)
from gpuyard.models.image import (
    INDEX_TYPES,
    Descriptor,
    ImageConfig,
    ImageIndex,
    ImageManifest,
    ImageRef,
    ManifestError,
    MediaType,
    go_architecture,
    parse_manifest,
)

__all__ = ["Credentials", "RegistryClient", "ResolvedImage"]

MAX_MANIFEST_BYTES = 4 << 20
MAX_CONFIG_BYTES = 8 << 20
_ACCEPT = ", ".join(
    [MediaType.OCI_MANIFEST, MediaType.OCI_INDEX, MediaType.DOCKER_MANIFEST, MediaType.DOCKER_LIST]
)
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class Credentials:
    """A registry user name and password (or token); shown as hidden everywhere."""

    __slots__ = ("_password", "_username")

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password

    def basic(self) -> str:
        """The ``Authorization`` header value for HTTP basic auth."""
        pair = f"{self._username}:{self._password}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def __repr__(self) -> str:
        return "Credentials(<hidden>)"

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class ResolvedImage:
    """One platform's image: the digest of its manifest and the manifest."""

    digest: str
    manifest: ImageManifest


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), dict(_CHALLENGE_PARAM.findall(rest))


class _RegistryAuth(httpx.Auth):
    """Basic auth, or the bearer-token challenge flow, answering the registry's 401s."""

    def __init__(self, credentials: Credentials | None) -> None:
        self.credentials = credentials
        self.header: str | None = None  # the last Authorization that worked

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.header:
            request.headers["Authorization"] = self.header
        response = yield request
        if response.status_code != 401:
            return
        scheme, params = _challenge(response.headers.get("www-authenticate", ""))
        if scheme == "basic" and self.credentials:
            self.header = self.credentials.basic()
        elif scheme == "bearer" and "realm" in params:
            token = yield self._token_request(request, params)
            self.header = self._bearer(token)
        else:
            return
        if self.header:
            request.headers["Authorization"] = self.header
            yield request

    def _token_request(self, request: httpx.Request, params: dict[str, str]) -> httpx.Request:
        realm = httpx.URL(params["realm"])
        query: dict[str, str] = {k: params[k] for k in ("service", "scope") if k in params}
        headers = {}
        if self.credentials:
            if realm.scheme != "https" and realm.netloc != request.url.netloc:
                raise Unauthorized(
                    f"the registry's token service {realm.host} is neither https nor the "
                    "registry itself; credentials are not sent there"
                )
            headers["Authorization"] = self.credentials.basic()
        return httpx.Request("GET", realm, params=query, headers=headers)

    @staticmethod
    def _bearer(response: httpx.Response) -> str | None:
        response.read()
        if response.status_code != 200:
            return None
        try:
            body = response.json()
        except ValueError:
            return None
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        return f"Bearer {token}" if isinstance(token, str) and token else None


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class RegistryClient:
    """A client of one registry; see the module docstring."""

    def __init__(
        self,
        base_url: str,
        *,
        credentials: Credentials | None = None,
        ca_file: Path | None = None,
        verify: bool = True,
        architecture: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        tls: ssl.SSLContext | bool = verify
        if verify and ca_file is not None:
            tls = ssl.create_default_context(cafile=str(ca_file))
        self.host = httpx.URL(base_url).netloc.decode()
        self.architecture = architecture or go_architecture(platform.machine())
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/v2/",
            verify=tls,
            auth=_RegistryAuth(credentials),
            transport=transport,
            timeout=timeout,
            follow_redirects=True,
        )

    def __repr__(self) -> str:
        return f"RegistryClient({self.host!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests and their errors -------------------------------------------------------

    def _request(
        self, method: str, path: str | httpx.URL, what: str, **kwargs: Any
    ) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise self._unreachable(error) from None
        self._check(response, what)
        return response

    @contextlib.contextmanager
    def _stream(self, path: str, what: str, **kwargs: Any) -> Iterator[httpx.Response]:
        try:
            with self._http.stream("GET", path, **kwargs) as response:
                self._check(response, what)
                yield response
        except httpx.TransportError as error:
            raise self._unreachable(error) from None

    def _read(self, path: str, what: str, limit: int, **kwargs: Any) -> tuple[bytes, str]:
        """A small document and its media type; more than ``limit`` bytes is refused
        without reading further (a hostile registry cannot fill the memory)."""
        body = bytearray()
        with self._stream(path, what, **kwargs) as response:
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > limit:
                    raise ImageError(f"{what} is larger than {limit} bytes; refused")
            media_type = response.headers.get("content-type", "").split(";")[0].strip()
        return bytes(body), media_type

    def _repository(self, ref: ImageRef) -> str:
        """``ref``'s repository, if ``ref`` is for this registry (no host: the pool's own)."""
        if ref.registry is not None and ref.registry != self.host:
            raise ImageError(
                f"image {ref} is in registry {ref.registry}, not {self.host}; "
                "use that registry's client"
            )
        return ref.repository

    def _unreachable(self, error: httpx.TransportError) -> RegistryUnavailable:
        reason = type(error).__name__
        if "CERTIFICATE" in str(error).upper():
            reason += ": its TLS certificate is not trusted; give the registry's CA file"
        return RegistryUnavailable(f"registry {self.host} cannot be reached ({reason})")

    def _check(self, response: httpx.Response, what: str) -> None:
        status = response.status_code
        if status in (401, 403):
            raise Unauthorized(
                f"registry {self.host} refused access to {what} ({status}): check the "
                "registry user name and password, and that this user may read it"
            )
        if status == 404:
            raise ImageNotFound(f"{what} was not found in registry {self.host}: check the name")
        if status >= 500 or status == 429:
            raise RegistryUnavailable(f"registry {self.host} answered {status} for {what}")
        if status >= 400:
            raise ImageError(f"registry {self.host} answered {status} for {what}")

    # -- reading ---------------------------------------------------------------------------

    def check_access(self) -> None:
        """Ask the registry's API root (``GET /v2/``) with the credentials, through the same
        basic or token flow as every request: ``Unauthorized`` when it refuses them (or wants
        some and none were given), ``RegistryUnavailable`` when it cannot be reached."""
        self._request("GET", "", "its API (/v2/)")

    def manifest(self, ref: ImageRef) -> tuple[str, ImageManifest | ImageIndex]:
        """The digest and contents of ``ref``'s manifest or index, verified when pinned."""
        path = f"{self._repository(ref)}/manifests/{ref.reference}"
        accept = {"Accept": _ACCEPT}
        body, media_type = self._read(path, f"image {ref}", MAX_MANIFEST_BYTES, headers=accept)
        digest = _sha256(body)
        if ref.digest and digest != ref.digest:
            raise DigestMismatch(f"the manifest of {ref} has digest {digest}, not {ref.digest}")
        try:
            return digest, parse_manifest(json.loads(body), media_type)
        except (ValueError, ManifestError) as error:
            raise ImageError(f"the manifest of {ref} cannot be read: {error}") from None

    def image(self, ref: ImageRef) -> ResolvedImage:
        """``ref``'s manifest for linux and this node's architecture, following an index."""
        digest, found = self.manifest(ref)
        if isinstance(found, ImageIndex):
            entry = found.for_platform(self.architecture)
            if entry is None:
                raise WrongArchitecture(
                    f"image {ref} has no linux/{self.architecture} variant (it has "
                    f"{', '.join(found.platforms()) or 'none'}); use an image built for it"
                )
            digest, found = self.manifest(ref.pinned(entry.digest))
            if isinstance(found, ImageIndex):
                raise ImageError(f"image {ref}: an index inside an index is not supported")
        return ResolvedImage(digest=digest, manifest=found)

    def resolve(self, ref: ImageRef) -> str:
        """The digest of ``ref``'s manifest for this node (what jobs pin)."""
        return self.image(ref).digest

    def config(self, ref: ImageRef, manifest: ImageManifest) -> ImageConfig:
        """The image's config blob, verified and parsed; its architecture must be ours."""
        descriptor = manifest.config
        if descriptor.size > MAX_CONFIG_BYTES:
            raise ImageError(f"the config of {ref} is larger than {MAX_CONFIG_BYTES} bytes")
        path = f"{self._repository(ref)}/blobs/{descriptor.digest}"
        body, _ = self._read(path, f"the config of {ref}", descriptor.size)
        if _sha256(body) != descriptor.digest:
            raise DigestMismatch(f"the config of {ref} does not match {descriptor.digest}")
        try:
            config = ImageConfig.from_json(json.loads(body))
        except ValueError as error:
            raise ImageError(f"the config of {ref} cannot be read: {error}") from None
        if config.architecture and config.architecture != self.architecture:
            raise WrongArchitecture(
                f"image {ref} is built for {config.os}/{config.architecture}, not "
                f"linux/{self.architecture}; use an image built for it"
            )
        return config

    def blob(self, ref: ImageRef, descriptor: Descriptor, dest: Path) -> None:
        """Download a blob to ``dest``, hashing as it is written; a wrong digest or size
        deletes the file and raises ``DigestMismatch`` naming the layer."""
        what = f"layer {descriptor.digest} of {ref}"
        digest, size = hashlib.sha256(), 0
        try:
            with (
                self._stream(
                    f"{self._repository(ref)}/blobs/{descriptor.digest}", what
                ) as response,
                dest.open("wb") as out,
            ):
                for chunk in response.iter_bytes(1 << 20):
                    size += len(chunk)
                    if size > descriptor.size:
                        break
                    digest.update(chunk)
                    out.write(chunk)
            if size != descriptor.size or "sha256:" + digest.hexdigest() != descriptor.digest:
                raise DigestMismatch(
                    f"{what}: the registry sent bytes that do not match the digest (or size "
                    f"{descriptor.size}); the layer was refused, its partial file deleted"
                )
        except BaseException:
            dest.unlink(missing_ok=True)
            raise

    # -- pushing ---------------------------------------------------------------------------

    def push(self, layout: Path, ref: ImageRef) -> str:
        """Push the first image of an OCI image layout directory as ``ref``; its digest."""
        index = json.loads((layout / "index.json").read_text())
        entry = Descriptor.from_json(index["manifests"][0])
        manifest_bytes = _layout_blob(layout, entry.digest).read_bytes()
        found = parse_manifest(json.loads(manifest_bytes), entry.media_type)
        if not isinstance(found, ImageManifest) or entry.media_type in INDEX_TYPES:
            raise ImageError("push takes an OCI layout whose first entry is an image manifest")
        for blob in (found.config, *found.layers):
            self._push_blob(ref, _layout_blob(layout, blob.digest), blob.digest)
        self._request(
            "PUT",
            f"{self._repository(ref)}/manifests/{ref.tag or entry.digest}",
            f"image {ref}",
            content=manifest_bytes,
            headers={"Content-Type": entry.media_type or MediaType.OCI_MANIFEST},
        )
        return entry.digest

    def _push_blob(self, ref: ImageRef, path: Path, digest: str) -> None:
        what = f"blob {digest} of {ref}"
        size = path.stat().st_size
        try:
            self._request("HEAD", f"{self._repository(ref)}/blobs/{digest}", what)
            return  # the registry has it
        except ImageNotFound:
            pass
        started = self._request("POST", f"{self._repository(ref)}/blobs/uploads/", what)
        location = self._http.base_url.join(started.headers["location"])
        self._request(
            "PUT",
            location.copy_merge_params({"digest": digest}),
            what,
            content=_chunks(path),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )


def _chunks(path: Path) -> Iterator[bytes]:
    """A file's bytes a MiB at a time, so pushing a large layer does not load it whole."""
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            yield chunk


def _layout_blob(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algorithm / hexdigest
