"""Image references, image configs and manifests: the pure rules of docs/images.md.

``ImageRef.parse`` reads what a user types for a job's image: a catalogue name with no registry
host (``official/pytorch:2.13``: the pool's own registry), any registry reference
(``host[:port]/repo[/more]:tag``), and an optional ``@sha256:<64 hex>`` digest, alone or after
a tag. The grammar is the OCI distribution one (lowercase path components joined by ``.``,
``_``, ``__`` or dashes; a first component is a registry host when it holds a ``.`` or a ``:``
or is ``localhost``). Every refusal is a ``ValueError`` that names what is wrong, since the API
returns it as a 422.

``ImageConfig`` is the part of an image's config JSON a worker needs (env, working dir,
entrypoint, cmd, user, platform, labels) and holds the argv rule: the job's command replaces
``CMD`` and ``ENTRYPOINT`` stays in front, as ``docker run IMAGE ARGS…`` does.

The manifest types read a registry's manifest or image index (JSON it sends, so untrusted: every
field is type-checked) and pick the descriptor of the node's platform.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

__all__ = [
    "DIGEST_PATTERN",
    "INDEX_TYPES",
    "MANIFEST_TYPES",
    "Descriptor",
    "ImageConfig",
    "ImageIndex",
    "ImageManifest",
    "ImageRef",
    "ManifestError",
    "MediaType",
    "go_architecture",
    "parse_manifest",
    "pinned_digest",
]

MAX_NAME_LENGTH = 255
"""The distribution spec's limit on a repository name, host included."""
MAX_REF_LENGTH = 512

DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]{1,5})?"
)
_TAG = re.compile(r"[\w][\w.-]{0,127}")


class MediaType(StrEnum):
    """The manifest and layer types a registry speaks (OCI and docker v2)."""

    OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
    OCI_INDEX = "application/vnd.oci.image.index.v1+json"
    OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
    OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
    OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
    OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
    DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
    DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
    DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
    DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


MANIFEST_TYPES = (MediaType.OCI_MANIFEST, MediaType.DOCKER_MANIFEST)
INDEX_TYPES = (MediaType.OCI_INDEX, MediaType.DOCKER_LIST)


def _check_text(text: str) -> None:
    if not text:
        raise ValueError("image reference is empty; write e.g. official/pytorch:2.13")
    if len(text) > MAX_REF_LENGTH:
        raise ValueError(f"image reference is too long ({len(text)} > {MAX_REF_LENGTH} characters)")
    if any(c.isspace() for c in text):
        raise ValueError(f"image reference {text!r} contains blanks; remove them")
    if not text.isascii() or not text.isprintable():
        raise ValueError(f"image reference {text!r} contains characters outside printable ASCII")


def _split_digest(text: str) -> tuple[str, str | None]:
    if "@" not in text:
        return text, None
    rest, digest = text.split("@", 1)
    if not DIGEST_PATTERN.fullmatch(digest):
        raise ValueError(
            f"image digest {digest!r} is not valid: write @sha256: followed by 64 lowercase "
            "hexadecimal digits"
        )
    return rest, digest


def _split_tag(text: str) -> tuple[str, str | None]:
    slash = text.rfind("/")
    colon = text.rfind(":")
    if colon <= slash:
        return text, None
    name, tag = text[:colon], text[colon + 1 :]
    if not _TAG.fullmatch(tag):
        raise ValueError(
            f"image tag {tag!r} is not valid: up to 128 letters, digits, '_', '.' or '-', "
            "not starting with '.' or '-'"
        )
    return name, tag


def _split_registry(name: str) -> tuple[str | None, str]:
    first, sep, rest = name.partition("/")
    if not sep or not ("." in first or ":" in first or first == "localhost"):
        return None, name
    if not _HOST.fullmatch(first):
        raise ValueError(f"registry host {first!r} is not a valid host[:port]")
    return first, rest


def _check_repository(repository: str, whole: str) -> None:
    if not repository:
        raise ValueError(f"image reference {whole!r} names no repository")
    for component in repository.split("/"):
        if component != component.lower():
            raise ValueError(
                f"repository {repository!r} must be lowercase (write {repository.lower()!r})"
            )
        if not _COMPONENT.fullmatch(component):
            raise ValueError(
                f"repository {repository!r} has an invalid part {component!r}: use lowercase "
                "letters and digits, separated by '.', '_', '__' or '-'"
            )
    if len(repository) > MAX_NAME_LENGTH:
        raise ValueError(f"repository name is too long ({len(repository)} > {MAX_NAME_LENGTH})")


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A parsed image reference. ``registry`` is None for the pool's own registry."""

    repository: str
    tag: str | None = "latest"
    digest: str | None = None
    registry: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        _check_text(text)
        rest, digest = _split_digest(text)
        name, tag = _split_tag(rest)
        registry, repository = _split_registry(name)
        _check_repository(repository, text)
        if tag is None and digest is None:
            tag = "latest"
        return cls(repository=repository, tag=tag, digest=digest, registry=registry)

    def pinned(self, digest: str) -> ImageRef:
        """The same reference, naming exactly the bytes of ``digest``."""
        if not DIGEST_PATTERN.fullmatch(digest):
            raise ValueError(f"{digest!r} is not a sha256 digest")
        return replace(self, digest=digest)

    @property
    def name(self) -> str:
        """Registry and repository, without tag or digest."""
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    @property
    def reference(self) -> str:
        """What goes after ``/manifests/`` in the registry API: the digest if pinned."""
        return self.digest or self.tag or "latest"

    @property
    def short(self) -> str:
        """For a listing: the name and tag, or the name and the digest's first 12 digits."""
        if self.tag:
            return f"{self.name}:{self.tag}"
        return f"{self.name}@{(self.digest or '')[:19]}"

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def pinned_digest(image: str | None) -> str | None:
    """The digest a job's image reference names (``…@sha256:…``), None if it names none or
    does not parse (a job's image is pinned at submission: docs/images.md)."""
    if not image:
        return None
    try:
        return ImageRef.parse(image).digest
    except ValueError:
        return None


def go_architecture(machine: str) -> str:
    """The OCI (Go) name of a CPU architecture as ``platform.machine()`` names it."""
    return _ARCHITECTURES.get(machine.lower(), machine.lower())


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"image config: {what} must be a list of strings")
    return tuple(value)


def _string(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"image config: {what} must be a string")
    return value


def _labels(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError("image config: Labels must map strings to strings")
    return dict(value)


@dataclass(frozen=True, slots=True)
class ImageConfig:
    """What a worker takes from an image: its environment, directory, user and argv."""

    env: tuple[str, ...] = ()
    working_dir: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    architecture: str = ""
    os: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, document: Any) -> ImageConfig:
        """Read an OCI or docker image config (the JSON object of the config blob)."""
        if not isinstance(document, dict):
            raise ValueError("image config must be a JSON object")
        inner = document.get("config")
        inner = {} if inner is None else inner
        if not isinstance(inner, dict):
            raise ValueError("image config: config must be an object")
        return cls(
            env=_strings(inner.get("Env"), "Env"),
            working_dir=_string(inner.get("WorkingDir"), "WorkingDir"),
            entrypoint=_strings(inner.get("Entrypoint"), "Entrypoint"),
            cmd=_strings(inner.get("Cmd"), "Cmd"),
            user=_string(inner.get("User"), "User"),
            architecture=_string(document.get("architecture"), "architecture"),
            os=_string(document.get("os"), "os"),
            labels=_labels(inner.get("Labels")),
        )

    def to_json(self) -> dict[str, Any]:
        """The config document ``from_json`` reads back to an equal value."""
        inner = {
            "Env": list(self.env),
            "WorkingDir": self.working_dir,
            "Entrypoint": list(self.entrypoint),
            "Cmd": list(self.cmd),
            "User": self.user,
            "Labels": dict(self.labels),
        }
        return {"architecture": self.architecture, "os": self.os, "config": inner}

    def environment(self) -> dict[str, str]:
        """``Env`` as a mapping; a later entry wins, an entry without ``=`` is skipped."""
        pairs = (item.split("=", 1) for item in self.env if "=" in item)
        return {key: value for key, value in pairs if key}

    def argv(self, command: Sequence[str] | None) -> list[str]:
        """The worker's argv: ``ENTRYPOINT`` then the job's command, or ``CMD`` without one.

        Docker's rule: arguments given at run time replace ``CMD``, never ``ENTRYPOINT``.
        """
        argv = [*self.entrypoint, *(self.cmd if command is None else command)]
        if not argv:
            raise ValueError("the image has no ENTRYPOINT or CMD; give the job a command")
        return argv


class ManifestError(ValueError):
    """A registry's manifest or index that does not read as one."""


@dataclass(frozen=True, slots=True)
class Descriptor:
    """A content descriptor: what a manifest points at, by digest and size."""

    media_type: str
    digest: str
    size: int
    architecture: str = ""
    os: str = ""

    @classmethod
    def from_json(cls, value: Any) -> Descriptor:
        if not isinstance(value, dict):
            raise ManifestError("descriptor must be an object")
        digest, size = value.get("digest"), value.get("size")
        if not isinstance(digest, str) or not DIGEST_PATTERN.fullmatch(digest):
            raise ManifestError(f"descriptor digest {digest!r} is not a sha256 digest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError(f"descriptor of {digest} has an invalid size {size!r}")
        platform = value.get("platform") or {}
        if not isinstance(platform, dict):
            raise ManifestError("descriptor platform must be an object")
        return cls(
            media_type=str(value.get("mediaType") or ""),
            digest=digest,
            size=size,
            architecture=str(platform.get("architecture") or ""),
            os=str(platform.get("os") or ""),
        )


@dataclass(frozen=True, slots=True)
class ImageManifest:
    """One image: its config blob and its layers, bottom first."""

    config: Descriptor
    layers: tuple[Descriptor, ...]

    @property
    def size(self) -> int:
        """Bytes to download: config and layers, compressed."""
        return self.config.size + sum(layer.size for layer in self.layers)


@dataclass(frozen=True, slots=True)
class ImageIndex:
    """A multi-platform image: one manifest per platform."""

    manifests: tuple[Descriptor, ...]

    def for_platform(self, architecture: str, os: str = "linux") -> Descriptor | None:
        for entry in self.manifests:
            if entry.os == os and entry.architecture == architecture:
                return entry
        return None

    def platforms(self) -> list[str]:
        return sorted({f"{m.os}/{m.architecture}" for m in self.manifests})


def _descriptors(value: Any, what: str) -> tuple[Descriptor, ...]:
    if not isinstance(value, list):
        raise ManifestError(f"manifest {what} must be a list")
    return tuple(Descriptor.from_json(item) for item in value)


def parse_manifest(document: Any, media_type: str) -> ImageManifest | ImageIndex:
    """Read a manifest or index; ``media_type`` is the registry's Content-Type (or the
    document's own ``mediaType`` when the header is missing)."""
    if not isinstance(document, dict):
        raise ManifestError("manifest must be a JSON object")
    kind = media_type or str(document.get("mediaType") or "")
    if kind in INDEX_TYPES or (not kind and "manifests" in document):
        return ImageIndex(manifests=_descriptors(document.get("manifests"), "manifests"))
    if kind in MANIFEST_TYPES or (not kind and "layers" in document):
        return ImageManifest(
            config=Descriptor.from_json(document.get("config")),
            layers=_descriptors(document.get("layers"), "layers"),
        )
    raise ManifestError(f"unsupported manifest type {kind!r} (need an OCI or docker v2 image)")
