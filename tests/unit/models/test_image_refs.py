"""Image references, configs and manifests (models/image.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyard.models.image import (
    Descriptor,
    ImageConfig,
    ImageIndex,
    ImageManifest,
    ImageRef,
    ManifestError,
    MediaType,
    go_architecture,
    parse_manifest,
    pinned_digest,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("official/pytorch:2.13", None, "official/pytorch", "2.13", None),
        ("alice/tools:v1", None, "alice/tools", "v1", None),
        ("alice/tools", None, "alice/tools", "latest", None),
        ("busybox", None, "busybox", "latest", None),
        ("localhost:5000/a/b/c:t", "localhost:5000", "a/b/c", "t", None),
        ("registry.example.com/team/img", "registry.example.com", "team/img", "latest", None),
        ("127.0.0.1:5001/x:y", "127.0.0.1:5001", "x", "y", None),
        (f"alice/tools@{DIGEST}", None, "alice/tools", None, DIGEST),
        (f"h.io/alice/tools:v2@{DIGEST}", "h.io", "alice/tools", "v2", DIGEST),
        ("a/my_repo.x__y--z:V1.0-rc_1", None, "a/my_repo.x__y--z", "V1.0-rc_1", None),
    ],
)
def test_parse_accepts_and_round_trips(
    text: str, registry: str | None, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )
    assert ImageRef.parse(str(ref)) == ref


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("Alice/tools:v1", "lowercase"),
        ("alice/tools@sha256:abc", "digest"),
        ("alice/tools@md5:" + "a" * 64, "digest"),
        ("alice/tools@sha256:" + "A" * 64, "digest"),
        ("alice tools", "blanks"),
        ("alice/tools:\t", "blanks"),
        ("a" * 600, "too long"),
        ("alice/" + "a" * 300, "too long"),
        ("alice/tools:-bad", "tag"),
        ("alice/tools:" + "t" * 129, "tag"),
        ("alice//tools", "invalid part"),
        ("alice/-tools", "invalid part"),
        ("h.io/", "no repository"),
        ("bad_host.io:x/repo", "host"),
        ("alice/tööls", "ASCII"),
    ],
)
def test_parse_refuses_with_a_message_naming_the_fault(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        ImageRef.parse(text)


def test_pinned_keeps_the_tag_and_adds_the_digest() -> None:
    ref = ImageRef.parse("official/pytorch:2.13")
    pinned = ref.pinned(DIGEST)
    assert str(pinned) == f"official/pytorch:2.13@{DIGEST}"
    assert pinned.reference == DIGEST
    assert ref.reference == "2.13"
    with pytest.raises(ValueError, match="sha256"):
        ref.pinned("sha256:xyz")


CONFIG = {
    "architecture": "amd64",
    "os": "linux",
    "config": {
        "Env": ["PATH=/usr/bin:/bin", "A=1=2", "NOEQUALS", "A=3"],
        "WorkingDir": "/work",
        "Entrypoint": ["/entry.sh"],
        "Cmd": ["python", "train.py"],
        "User": "1000:1000",
        "Labels": {"org.example": "yes"},
    },
}


def test_config_reads_the_fields_a_worker_needs() -> None:
    config = ImageConfig.from_json(CONFIG)
    assert config.working_dir == "/work"
    assert config.user == "1000:1000"
    assert (config.architecture, config.os) == ("amd64", "linux")
    assert config.labels == {"org.example": "yes"}
    assert config.environment() == {"PATH": "/usr/bin:/bin", "A": "3"}
    assert ImageConfig.from_json(config.to_json()) == config


def test_argv_keeps_entrypoint_and_replaces_cmd() -> None:
    config = ImageConfig.from_json(CONFIG)
    assert config.argv(None) == ["/entry.sh", "python", "train.py"]
    assert config.argv(["bash", "-c", "x"]) == ["/entry.sh", "bash", "-c", "x"]
    no_entry = ImageConfig(cmd=("sh",))
    assert no_entry.argv(["python3", "t.py"]) == ["python3", "t.py"]
    assert no_entry.argv(None) == ["sh"]
    with pytest.raises(ValueError, match="give the job a command"):
        ImageConfig().argv(None)


@pytest.mark.parametrize(
    "document",
    [
        [],
        {"config": []},
        {"config": {"Env": "A=1"}},
        {"config": {"Cmd": [1]}},
        {"config": {"WorkingDir": 3}},
        {"config": {"Labels": {"a": 1}}},
    ],
)
def test_config_refuses_wrong_types(document: object) -> None:
    with pytest.raises(ValueError, match="image config"):
        ImageConfig.from_json(document)


def _descriptor(arch: str = "", os: str = "", size: int = 10) -> dict[str, object]:
    value: dict[str, object] = {"mediaType": "x", "digest": DIGEST, "size": size}
    if arch:
        value["platform"] = {"architecture": arch, "os": os}
    return value


def test_manifest_and_index_parse() -> None:
    manifest = parse_manifest(
        {"config": _descriptor(size=5), "layers": [_descriptor(size=7)] * 2},
        MediaType.OCI_MANIFEST,
    )
    assert isinstance(manifest, ImageManifest)
    assert manifest.size == 19
    index = parse_manifest(
        {"manifests": [_descriptor("arm64", "linux"), _descriptor("amd64", "windows")]},
        MediaType.DOCKER_LIST,
    )
    assert isinstance(index, ImageIndex)
    assert index.for_platform("arm64") == Descriptor("x", DIGEST, 10, "arm64", "linux")
    assert index.for_platform("amd64") is None
    assert index.platforms() == ["linux/arm64", "windows/amd64"]


@pytest.mark.parametrize(
    ("document", "media_type"),
    [
        ({"config": {"digest": "sha256:1", "size": 1}, "layers": []}, MediaType.OCI_MANIFEST),
        ({"config": _descriptor(size=-1), "layers": []}, MediaType.OCI_MANIFEST),
        ({"config": _descriptor(), "layers": {}}, MediaType.OCI_MANIFEST),
        ({"config": _descriptor(), "layers": []}, "text/html"),
        ("nope", MediaType.OCI_INDEX),
    ],
)
def test_manifest_refuses_malformed_documents(document: object, media_type: str) -> None:
    with pytest.raises(ManifestError):
        parse_manifest(document, media_type)


def test_go_architecture_names() -> None:
    assert go_architecture("x86_64") == "amd64"
    assert go_architecture("aarch64") == "arm64"
    assert go_architecture("riscv64") == "riscv64"


_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
_chunks = st.text(_ALNUM, min_size=1, max_size=6)
_components = st.builds(
    lambda first, rest: first + "".join(sep + chunk for sep, chunk in rest),
    _chunks,
    st.lists(st.tuples(st.sampled_from([".", "_", "__", "-", "--"]), _chunks), max_size=2),
)
_hosts = st.sampled_from([None, "localhost", "localhost:5000", "reg.example.com", "10.0.0.1:443"])
_tags = st.one_of(
    st.none(),
    st.builds(
        str.__add__,
        st.text(_ALNUM + "ABZ_", min_size=1, max_size=1),
        st.text(_ALNUM + "._-", max_size=8),
    ),
)
_digests = st.one_of(st.none(), st.text("0123456789abcdef", min_size=64, max_size=64))


@settings(max_examples=100, deadline=None)
@given(
    host=_hosts,
    parts=st.lists(_components, min_size=1, max_size=3),
    tag=_tags,
    hexdigest=_digests,
)
def test_every_valid_reference_round_trips(
    host: str | None, parts: list[str], tag: str | None, hexdigest: str | None
) -> None:
    digest = f"sha256:{hexdigest}" if hexdigest else None
    repository = "/".join(parts)
    if host is None and "." in parts[0] and len(parts) > 1:
        return  # a first part with a dot names a registry host: not a catalogue name
    ref = ImageRef(
        repository=repository,
        tag=tag or (None if digest else "latest"),
        digest=digest,
        registry=host,
    )
    assert ImageRef.parse(str(ref)) == ref


def test_the_image_fields_of_a_job_need_an_image_and_mount_below_its_root() -> None:
    from pydantic import ValidationError

    from gpuyard.models import JobSpec

    mount = {"source": "/data", "target": "/data"}
    for extra in ({"container_mounts": [mount]}, {"env_over_image": []}, {"shm_size": "1G"}):
        with pytest.raises(ValidationError, match="only a job in an image"):
            JobSpec(command="x", **extra)
    for target in ("/", "/a/../b", "data"):
        bad = {"source": "/data", "target": target}
        with pytest.raises(ValidationError, match="container mount"):
            JobSpec(command="x", image="a/b:1", container_mounts=[bad])
    with pytest.raises(ValidationError, match="not an environment variable name"):
        JobSpec(command="x", image="a/b:1", env_over_image=["A-B"])
    JobSpec(command="x", image="a/b:1", container_mounts=[mount], env_over_image=["PATH"])


def test_pinned_digest_is_the_digest_a_reference_names() -> None:
    digest = "sha256:" + "d" * 64
    assert pinned_digest(f"registry.test/alice/train:1@{digest}") == digest
    assert pinned_digest(f"official/pytorch@{digest}") == digest
    assert pinned_digest("official/pytorch:2.13") is None  # not pinned
    assert pinned_digest(None) is None
    assert pinned_digest("Not A Reference") is None
