"""The image catalogue over the real HTTP API and a real registry (Debian's docker-registry,
TLS, htpasswd), on both databases: push (OCI and docker archives), list, show, share, delete,
and the acceptance of issue 26: another user's private image is the same 404 (and the same
422 at submission) as a missing one, until it is shared."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuyard.errors import GpuyardError, InvalidSpec, NotFound, PermissionDenied, TooLarge
from gpuyard.models.image import ImageRef
from gpuyard.models.image_catalogue import ImageVisibility
from gpuyard.models.job import JobSpec
from gpuyard.settings import Settings
from gpuyard.testing.auth import AsUser
from gpuyard.testing.registry import (
    NODE_ARCH,
    TestRegistry,
    docker_archive,
    layout_archive,
    tar_layer,
    write_layout,
)

UPLOAD_MAX = 1 << 20


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small image as an OCI archive and as a docker archive."""
    root = tmp_path_factory.mktemp("archives")
    layers = [tar_layer([("etc/os-release", b"ID=catalogue-test\n")])]
    write_layout(root / "layout", layers, architecture=NODE_ARCH)
    return {
        "oci": layout_archive(root / "layout", root / "oci.tar"),
        "docker": docker_archive(root / "docker.tar", layers, architecture=NODE_ARCH),
    }


@pytest.fixture
def settings(tmp_path: Path, registry: TestRegistry) -> Settings:
    return registry.pool_settings(
        tmp_path / "home",
        image_upload_max=UPLOAD_MAX,
        image_sources=[registry.host],
        image_sources_ca=registry.ca_file,
    )


def _same_answer(hidden: GpuyardError, missing: GpuyardError, name: str, other: str) -> None:
    assert type(hidden) is type(missing)
    assert hidden.detail.replace(name, other) == missing.detail


def test_a_private_image_is_hidden_as_a_missing_one_until_shared(
    as_user: AsUser, archives: dict[str, Path]
) -> None:
    alice = as_user("alice", group="lab")
    bob = as_user("bob", group="ops")
    pushed = alice.push_image(archives["oci"], "x:1", description="a test image")
    assert (pushed.name, pushed.owner, pushed.visibility) == ("alice/x:1", "alice", "private")
    assert pushed.digest.startswith("sha256:") and pushed.size > 0
    assert [i.name for i in alice.images()] == ["alice/x:1"]
    assert alice.image("alice/x:1") == pushed
    assert bob.images() == []

    with pytest.raises(NotFound) as hidden:
        bob.image("alice/x:1")
    with pytest.raises(NotFound) as missing:
        bob.image("alice/y:1")
    _same_answer(hidden.value, missing.value, "alice/x:1", "alice/y:1")

    with pytest.raises(InvalidSpec) as hidden_job:
        bob.submit(JobSpec(command="true", image="alice/x:1"))
    with pytest.raises(InvalidSpec) as missing_job:
        bob.submit(JobSpec(command="true", image="alice/y:1"))
    _same_answer(hidden_job.value, missing_job.value, "alice/x:1", "alice/y:1")
    # Nor by digest, nor by changing it.
    with pytest.raises(InvalidSpec):
        bob.submit(JobSpec(command="true", image=f"alice/x@{pushed.digest}"))
    with pytest.raises(NotFound):
        bob.share_image("alice/x:1", "public")
    with pytest.raises(NotFound):
        bob.delete_image("alice/x:1")

    job = alice.submit(JobSpec(command="true", image="alice/x:1"))
    assert job.spec.image == f"alice/x:1@{pushed.digest}"

    shared = alice.share_image("alice/x:1", ImageVisibility.PUBLIC)
    assert shared.visibility is ImageVisibility.PUBLIC
    assert [i.name for i in bob.images()] == ["alice/x:1"]
    assert bob.submit(JobSpec(command="true", image="alice/x:1")).spec.image == job.spec.image
    with pytest.raises(PermissionDenied, match="only its owner or an admin"):
        bob.delete_image("alice/x:1")

    alice.delete_image("alice/x:1")
    with pytest.raises(NotFound):
        alice.image("alice/x:1")


def test_group_visibility_reaches_the_owners_group(
    as_user: AsUser, archives: dict[str, Path]
) -> None:
    alice = as_user("alice", group="lab")
    gina = as_user("gina", group="lab")
    otto = as_user("otto", group="ops")
    alice.push_image(archives["oci"], "alice/team:2", visibility="group", scope="development")
    assert [i.name for i in gina.images()] == ["alice/team:2"]
    assert gina.images(scope="training") == []
    assert otto.images() == []


def test_a_docker_archive_is_pushed_and_official_images_are_for_admins(
    as_user: AsUser, archives: dict[str, Path]
) -> None:
    alice = as_user("alice")
    admin = as_user("ada", admin=True)
    with pytest.raises(InvalidSpec, match="only admins push official"):
        alice.push_image(archives["docker"], "official/x:1")
    with pytest.raises(InvalidSpec, match="write alice/NAME:TAG, not bob/x"):
        alice.push_image(archives["docker"], "bob/x:1")
    with pytest.raises(PermissionDenied, match="only admins"):
        alice.push_image(archives["docker"], "x:1", visibility="official")
    official = admin.push_image(archives["docker"], "official/base:1", accelerator="H200")
    assert official.visibility is ImageVisibility.OFFICIAL
    assert [i.name for i in alice.images(accelerator="H200")] == ["official/base:1"]
    assert alice.images(accelerator="A100") == []
    job = alice.submit(JobSpec(command="true", image="official/base:1"))
    assert job.spec.image == f"official/base:1@{official.digest}"


def test_hostile_and_oversized_uploads_are_refused_and_nothing_is_recorded(
    as_user: AsUser, tmp_path: Path, settings: Settings
) -> None:
    alice = as_user("alice")
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as tar:
        info = tarfile.TarInfo("../../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(InvalidSpec, match=r"'\.\.' component"):
        alice.push_image(evil, "evil:1")
    big = tmp_path / "big.tar"
    with tarfile.open(big, "w") as tar:
        info = tarfile.TarInfo("blob")
        info.size = UPLOAD_MAX + 1
        tar.addfile(info, io.BytesIO(os.urandom(info.size)))
    with pytest.raises(TooLarge, match="GPUYARD_IMAGE_UPLOAD_MAX"):
        alice.push_image(big, "big:1")  # its Content-Length says so: refused before reading
    with pytest.raises(InvalidSpec, match="write alice/NAME:TAG, not bob/big"):
        alice.push_image(big, "bob/big:1")  # its name is refused before its size is looked at

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused as the bytes arrive
        for _ in range(4):
            yield b"\0" * (UPLOAD_MAX // 2)

    headers = {"Authorization": f"Bearer {alice.token}"}
    streamed = httpx.post(
        f"{alice.url}/api/v1/images", params={"name": "big:2"}, content=chunks(), headers=headers
    )
    assert streamed.status_code == 413, streamed.text
    assert "GPUYARD_IMAGE_UPLOAD_MAX" in streamed.json()["detail"]
    assert alice.images() == []
    uploads = settings.home / "uploads"
    assert not uploads.exists() or list(uploads.iterdir()) == []


def test_an_image_is_copied_from_a_listed_registry_with_credentials_not_kept(
    as_user: AsUser, registry: TestRegistry, archives: dict[str, Path], tmp_path: Path
) -> None:
    """The source registry is the test registry itself, read as bob: the copy lands in
    alice's namespace with the same layers; a host not listed is never contacted."""
    layout = tmp_path / "source"
    layers = [tar_layer([("etc/source", b"copied\n")])]
    write_layout(layout, layers, architecture=NODE_ARCH)
    with registry.client("bob") as client:
        client.push(layout, ImageRef.parse("ext/src:1"))
        source = client.image(ImageRef.parse("ext/src:1")).manifest
    alice = as_user("alice")
    host = registry.host
    password = registry.users["bob"]
    copied = alice.copy_image(f"{host}/ext/src:1", "copy:1", username="bob", password=password)
    assert (copied.name, copied.owner, copied.visibility) == ("alice/copy:1", "alice", "private")
    with registry.client("alice") as client:
        landed = client.image(ImageRef.parse("alice/copy:1"))
    assert landed.digest == copied.digest
    assert landed.manifest.layers == source.layers and copied.size == source.size
    job = alice.submit(JobSpec(command="true", image="alice/copy:1"))
    assert job.spec.image == f"alice/copy:1@{copied.digest}"

    with pytest.raises(GpuyardError) as refused:
        alice.copy_image(f"{host}/ext/src:1", "copy:2", username="bob", password="wrong-pw")
    assert refused.value.status_code == 403 and "wrong-pw" not in refused.value.detail
    with pytest.raises(InvalidSpec, match="not one this pool copies images from"):
        alice.copy_image("elsewhere.example:5000/x:1", "copy:3")
    with pytest.raises(InvalidSpec, match="names no registry host"):
        alice.copy_image("ext/src:1", "copy:4")
    assert [i.name for i in alice.images()] == ["alice/copy:1"]
