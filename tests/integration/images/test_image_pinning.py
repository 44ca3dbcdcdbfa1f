"""Jobs' images pinned at submission (:class:`gpuyard.services.images.ImagePinner`), against
the test registry: a tag becomes the digest of what the registry holds; what it lacks, or what
another registry holds, is refused before anything is stored, with the image named."""

from __future__ import annotations

import pytest

from gpuyard.errors import GpuyardError, InvalidSpec
from gpuyard.executors.local.node_images import DEFAULT_SHM, shm_size
from gpuyard.images.access import RegistryAccess
from gpuyard.images.errors import ImageError
from gpuyard.models.access import Caller
from gpuyard.models.image_catalogue import may_see
from gpuyard.models.job import JobSpec
from gpuyard.services.images import ImagePinner, needs_registry
from gpuyard.testing.registry import PushedImage, TestRegistry


@pytest.fixture
def pinner(registry: TestRegistry) -> ImagePinner:
    access = RegistryAccess(registry.url, registry.ca_file, registry.credentials("alice"))
    # The catalogue's rule for images it does not hold: alice/… is alice's.
    return ImagePinner(access, lambda user, ref: may_see(Caller(user), ref.repository, None))


def test_a_tag_is_pinned_to_the_digest_the_registry_holds(
    pinner: ImagePinner, busybox_image: PushedImage
) -> None:
    specs = [JobSpec(command="x", image="alice/busybox:1"), JobSpec(command="y")]
    assert needs_registry(specs) and not needs_registry(specs[1:])
    pinned = pinner.pinned(specs, owner="alice")
    assert pinned[0].image == f"alice/busybox:1@{busybox_image.digest}"
    assert pinned[1] == specs[1]
    # Pinned already: checked, kept.
    again = pinner.pinned([JobSpec(command="x", image=pinned[0].image)], owner="alice")
    assert again[0].image == pinned[0].image


@pytest.mark.parametrize(
    ("image", "error", "says"),
    [
        ("alice/busybox:2", InvalidSpec, "image alice/busybox:2 is not in the pool's registry"),
        ("alice/other:1", InvalidSpec, "image alice/other:1 is not in the pool's registry"),
        ("elsewhere.example:5000/x:1", ImageError, "this pool pulls only from its own"),
    ],
)
def test_what_the_registry_lacks_is_refused_naming_it(
    pinner: ImagePinner,
    busybox_image: PushedImage,
    image: str,
    error: type[GpuyardError],
    says: str,
) -> None:
    with pytest.raises(error) as raised:
        pinner.pinned([JobSpec(command="x", image=image)], owner="alice")
    assert says in raised.value.detail
    # In a batch, the index of the job refused.
    with pytest.raises(error) as raised:
        pinner.pinned([JobSpec(command="x"), JobSpec(command="x", image=image)], owner="alice")
    assert raised.value.detail.startswith("jobs[1]: ")


def test_a_pool_without_a_registry_refuses_images_and_takes_the_rest() -> None:
    pinner = ImagePinner(None, lambda _user, _ref: True)
    with pytest.raises(InvalidSpec, match="this pool has no image registry"):
        pinner.pinned([JobSpec(command="x", image="alice/busybox:1")], owner="alice")
    assert pinner.pinned([JobSpec(command="x")], owner="alice") == [JobSpec(command="x")]


def test_shm_is_what_the_job_asked_else_half_its_memory() -> None:
    assert shm_size(8 << 30, 64 << 30) == 8 << 30
    assert shm_size(0, 64 << 30) == 32 << 30
    assert shm_size(0, 32 << 20) == 64 << 20  # never below a container's usual 64M
    assert shm_size(0, 0) == DEFAULT_SHM


def test_another_users_image_is_refused_as_a_missing_one(
    pinner: ImagePinner, busybox_image: PushedImage
) -> None:
    """bob may not see alice/…: the registry is not even asked, and the answer is word for
    word the one for an image the registry lacks."""
    with pytest.raises(InvalidSpec) as hidden:
        pinner.pinned([JobSpec(command="x", image="alice/busybox:1")], owner="bob")
    with pytest.raises(InvalidSpec) as missing:
        pinner.pinned([JobSpec(command="x", image="bob/busybox:1")], owner="bob")
    assert hidden.value.detail.replace("alice", "bob") == missing.value.detail
    assert hidden.value.status_code == missing.value.status_code == 422
