"""The image catalogue's types and its one visibility rule (docs/images.md, "The catalogue").

An image of the pool's registry is visible to a caller when:

- the caller is an admin; or
- it is in the catalogue and is ``official`` or ``public``, is the caller's own, or is
  ``group`` and the caller is in the group its owner pushed it from; or
- it is not in the catalogue (pushed to the registry directly) and the first component of
  its repository is ``official`` (everyone) or the caller's own user name.

:func:`may_see` is that rule; listing, showing and pinning at submission all ask it, and an
image a caller may not see is answered exactly as a missing one. :func:`may_change` says who
may delete or share an entry (its owner, or an admin), and :func:`push_repository` where a
push lands (``<user>/<name>``; ``official/<name>`` for admins).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field, SecretStr

from gpuyard.models.access import Caller
from gpuyard.models.image import ImageRef

__all__ = [
    "OFFICIAL_NAMESPACE",
    "CatalogueEntry",
    "ImageCopy",
    "ImageScope",
    "ImageShare",
    "ImageView",
    "ImageVisibility",
    "may_change",
    "may_see",
    "push_repository",
]

OFFICIAL_NAMESPACE = "official"
"""The repositories' first component for the pool's official images (pushed by admins)."""


class ImageVisibility(StrEnum):
    PRIVATE = "private"
    """Its owner (and admins) only."""
    GROUP = "group"
    """Also the members of the group its owner pushed it from."""
    PUBLIC = "public"
    """Every user of the pool."""
    OFFICIAL = "official"
    """Every user; one of the pool's official images (set by admins only)."""


class ImageScope(StrEnum):
    """What an image is made for, as the job forms filter it."""

    TRAINING = "training"
    DEVELOPMENT = "development"


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    """What the rule needs of a catalogue row."""

    owner: str
    visibility: ImageVisibility
    group_id: int | None = None


def may_see(caller: Caller, repository: str, entry: CatalogueEntry | None) -> bool:
    """Whether ``caller`` may see (list, show, run) an image of the pool's registry; ``entry``
    is its catalogue entry, None for an image the catalogue does not hold."""
    if caller.admin:
        return True
    if entry is None:
        namespace = repository.split("/", 1)[0]
        return caller.signed_in and namespace in (OFFICIAL_NAMESPACE, caller.name)
    if entry.visibility in (ImageVisibility.PUBLIC, ImageVisibility.OFFICIAL):
        return caller.signed_in
    if caller.signed_in and entry.owner == caller.name:
        return True
    return (
        entry.visibility is ImageVisibility.GROUP
        and entry.group_id is not None
        and entry.group_id == caller.group_id
    )


def may_change(caller: Caller, entry: CatalogueEntry) -> bool:
    """Whether ``caller`` may delete ``entry`` or change its visibility."""
    return caller.admin or (caller.signed_in and entry.owner == caller.name)


def push_repository(caller: Caller, ref: ImageRef) -> ImageRef:
    """Where ``caller``'s push of ``ref`` lands: a bare name goes under the caller's own
    namespace; ``official/…`` is for admins; another user's namespace is refused. Raises
    ``ValueError`` saying what to write instead."""
    if ref.registry is not None or ref.digest is not None or ref.tag is None:
        raise ValueError(
            f"push names an image of the pool's registry by name and tag, not {ref}: "
            f"write e.g. {caller.name}/NAME:TAG"
        )
    namespace, sep, _ = ref.repository.partition("/")
    if not sep:
        try:
            ref = ImageRef.parse(f"{caller.name}/{ref.repository}:{ref.tag}")
        except ValueError:
            ref = ImageRef(repository="", registry="?")
        if ref.registry is not None:  # not a name, or one that reads as a registry host
            raise ValueError(
                f"user name {caller.name!r} cannot name a repository (lowercase letters, digits "
                "and separators only); an admin pushes the image for you"
            )
        namespace = caller.name
    if namespace == OFFICIAL_NAMESPACE:  # before the caller's own: a user named "official"
        if caller.admin:
            return ref
        raise ValueError("only admins push official/… images; push it as your own and share it")
    if namespace == caller.name:
        return ref
    raise ValueError(
        f"you push into your own namespace: write {caller.name}/NAME:TAG, not {ref.repository}"
    )


class ImageView(BaseModel):
    """One image of the catalogue, as the API shows it."""

    name: str = Field(description="Repository and tag in the pool's registry, e.g. alice/x:1.")
    repository: str
    tag: str
    digest: str
    owner: str
    visibility: ImageVisibility
    scope: ImageScope
    accelerator: str = Field(
        "", description="The accelerator kind it is built for (a node's gpu_model); '' any."
    )
    description: str = ""
    size: int = Field(description="Bytes of its config and layers, compressed.")
    pushed_by: str
    pushed_at: datetime


class ImageShare(BaseModel):
    """A change of an image's visibility."""

    visibility: ImageVisibility


class ImageCopy(BaseModel):
    """A push of an image copied from another registry (one the pool's admin listed)."""

    source: str = Field(max_length=512, description="HOST[:PORT]/REPO:TAG in that registry.")
    name: str = Field(max_length=512, description="Where it lands, e.g. train:3 (yours).")
    scope: ImageScope = ImageScope.TRAINING
    accelerator: str = Field("", max_length=64)
    description: str = Field("", max_length=2000)
    visibility: ImageVisibility | None = None
    username: str | None = Field(
        None,
        max_length=256,
        description="For that registry; without it, your saved login there "
        "(PUT /api/v1/registry-logins/HOST), if any.",
    )
    password: SecretStr | None = Field(
        None, max_length=4096, description="For that registry: used for this copy, never kept."
    )
