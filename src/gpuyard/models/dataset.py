"""The dataset catalogue's types (docs/datasets.md): names, refs, versions and their states,
the manifest, and who sees what.

A dataset belongs to its owner and has a name unique among the owner's datasets (the charset
of a job's mount names). Its versions are numbered 1, 2, … in the order they were made and,
once ``ready``, never change: a new upload or a new path is a new version. A version's
**manifest** lists every regular file below it (relative path, size, sha256) and has a
canonical digest, so a later reader can tell which file changed.

Who sees a dataset is the image catalogue's rule (:func:`gpuyard.models.image_catalogue.may_see`
over an entry of the same owner, visibility and group): one rule in one place. A dataset a
caller may not see is answered as a missing one.

A **ref** names a version: ``name`` or ``name@latest`` (the newest ready version),
``name@3``, and any of them behind ``owner/``. Without an owner it is the caller's own
dataset of that name, else the only one of that name the caller may see (two or more:
the caller writes the owner).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from gpuyard.errors import IllegalTransition
from gpuyard.models.access import Caller
from gpuyard.models.image_catalogue import CatalogueEntry, ImageVisibility
from gpuyard.models.image_catalogue import may_change as _may_change_entry
from gpuyard.models.image_catalogue import may_see as _may_see_entry

__all__ = [
    "MAX_DATASET_NAME",
    "DatasetCreate",
    "DatasetFilter",
    "DatasetRef",
    "DatasetShare",
    "DatasetVersionView",
    "DatasetView",
    "DatasetVisibility",
    "Manifest",
    "ManifestFile",
    "UploadStart",
    "UploadView",
    "VersionState",
    "check_dataset_name",
    "check_move",
    "may_change",
    "may_see",
]

MAX_DATASET_NAME = 128
_NAME = re.compile(r"^(?!\.{1,2}$)[\w.-]{1,128}$", re.ASCII)
"""As a job's mount names (models/job.py), in ASCII: a dataset mounts under its name."""
_OWNER = re.compile(r"^[\w.@+-]{1,64}$", re.ASCII)
LATEST = "latest"


RESERVED = frozenset({"manifest", "favourite"})
"""Names the API's paths end with (``/datasets/OWNER/NAME/manifest``): no dataset has one."""


def check_dataset_name(name: str) -> str:
    """``name`` if it may name a dataset; else ``ValueError`` saying what may."""
    if not _NAME.match(name) or name in RESERVED:
        raise ValueError(
            f"a dataset name is 1 to {MAX_DATASET_NAME} letters, digits, '_', '.' or '-', "
            f"and not '.', '..', 'favourite' or 'manifest' (got {name!r})"
        )
    return name


class DatasetVisibility(StrEnum):
    """Who sees a dataset (and may mount it), besides admins."""

    PRIVATE = "private"
    """Its owner only ("mine")."""
    GROUP = "group"
    """Also the members of the group its owner was in when it was made."""
    PUBLIC = "public"
    """Every user of the pool."""

    @classmethod
    def parse(cls, text: str) -> DatasetVisibility:
        """``text`` as a visibility; ``mine`` is ``private``. ``ValueError`` otherwise."""
        word = "private" if text == "mine" else text
        try:
            return cls(word)
        except ValueError:
            raise ValueError(
                f"visibility {text!r} is not one of mine (private), group, public"
            ) from None


class DatasetFilter(StrEnum):
    """Which datasets a listing keeps (of those the caller may see)."""

    ALL = "all"
    MINE = "mine"
    SHARED = "shared"
    """Others' datasets shared with the caller's group."""
    PUBLIC = "public"
    FAVOURITES = "favourites"


def _entry(owner: str, visibility: DatasetVisibility, group_id: int | None) -> CatalogueEntry:
    return CatalogueEntry(
        owner=owner, visibility=ImageVisibility(visibility.value), group_id=group_id
    )


def may_see(
    caller: Caller, *, owner: str, visibility: DatasetVisibility, group_id: int | None
) -> bool:
    """Whether ``caller`` may see (list, show, mount) a dataset: the catalogue's one rule."""
    return _may_see_entry(caller, "", _entry(owner, visibility, group_id))


def may_change(caller: Caller, *, owner: str) -> bool:
    """Whether ``caller`` may add versions to, delete or share a dataset (owner or admin)."""
    return _may_change_entry(caller, _entry(owner, DatasetVisibility.PRIVATE, None))


class VersionState(StrEnum):
    """Where a version is. ``ready`` and ``failed`` are terminal: a ready version's files and
    manifest never change (a new one is made instead)."""

    UPLOADING = "uploading"
    """An upload session is receiving its archive."""
    HASHING = "hashing"
    """Its files are being unpacked (an upload) and hashed into its manifest."""
    READY = "ready"
    """Its manifest is known; jobs may mount it."""
    FAILED = "failed"
    """It could not be made; ``error`` says why. Only deleting it is left."""

    def is_terminal(self) -> bool:
        return self in (VersionState.READY, VersionState.FAILED)


_MOVES: dict[VersionState, frozenset[VersionState]] = {
    VersionState.UPLOADING: frozenset({VersionState.HASHING, VersionState.FAILED}),
    VersionState.HASHING: frozenset({VersionState.READY, VersionState.FAILED}),
    VersionState.READY: frozenset(),
    VersionState.FAILED: frozenset(),
}
"""Every legal move of a version's state."""


def check_move(old: VersionState, new: VersionState) -> None:
    """Raise :class:`IllegalTransition` unless ``old`` may become ``new``."""
    if new not in _MOVES[old]:
        raise IllegalTransition(f"a dataset version that is {old} cannot become {new}")


@dataclass(frozen=True, slots=True)
class DatasetRef:
    """``[owner/]name[@version|@latest]``; ``version`` None means the newest ready one."""

    name: str
    owner: str | None = None
    version: int | None = None

    @classmethod
    def parse(cls, text: str) -> DatasetRef:
        """Parse a ref; ``ValueError`` saying what a ref looks like."""
        how = "write NAME, NAME@VERSION, NAME@latest or OWNER/NAME@VERSION"
        base, at, version_text = text.strip().partition("@")
        owner, slash, name = base.rpartition("/")
        if slash and not _OWNER.match(owner):
            raise ValueError(f"dataset ref {text!r}: {owner!r} is not a user name; {how}")
        try:
            check_dataset_name(name)
        except ValueError as error:
            raise ValueError(f"dataset ref {text!r}: {error}; {how}") from None
        version: int | None = None
        if at and version_text != LATEST:
            if not version_text.isdigit() or not 1 <= int(version_text) < 1 << 31:
                raise ValueError(
                    f"dataset ref {text!r}: the version is a number from 1, or latest; {how}"
                )
            version = int(version_text)
        return cls(name=name, owner=owner if slash else None, version=version)

    def __str__(self) -> str:
        owner = f"{self.owner}/" if self.owner else ""
        return f"{owner}{self.name}@{self.version if self.version else LATEST}"


class ManifestFile(BaseModel):
    """One regular file of a version."""

    path: str = Field(description="Relative to the version's root, '/'-separated.")
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Manifest(BaseModel):
    """Every regular file of a version, sorted by path (directories and links are not
    listed: a job sees them, but nothing of theirs is hashed)."""

    files: list[ManifestFile] = Field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def digest(self) -> str:
        """``sha256:`` over the canonical JSON of the sorted files (path, size, sha256):
        two versions with the same files have the same digest, whatever order they were
        hashed in."""
        rows = sorted((f.path, f.size, f.sha256) for f in self.files)
        canonical = json.dumps(rows, separators=(",", ":"), ensure_ascii=False)
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


class DatasetVersionView(BaseModel):
    """One version of a dataset, as the API shows it."""

    version: int
    state: VersionState
    size: int = Field(0, description="Bytes of its files (0 until hashed).")
    files: int = Field(0, description="How many regular files it holds.")
    digest: str = Field("", description="Its manifest's digest (sha256:…), once ready.")
    source: str = Field(description="'path' (made from shared storage) or 'upload'.")
    path: str | None = Field(
        None, description="Where its files are: shown to its owner and admins only."
    )
    error: str = Field("", description="Why it failed.")
    created_at: datetime
    created_by: str


class DatasetView(BaseModel):
    """A dataset and its versions."""

    name: str
    owner: str
    visibility: DatasetVisibility
    description: str = ""
    created_at: datetime
    favourite: bool = Field(False, description="Whether it is one of the caller's favourites.")
    latest: int | None = Field(None, description="Its newest ready version.")
    size: int = Field(0, description="Bytes of its newest ready version.")
    versions: list[DatasetVersionView] = Field(default_factory=list)


class DatasetCreate(BaseModel):
    """A new version made from a directory on shared storage (below an admin-listed root);
    the dataset is made when it is new."""

    name: str = Field(max_length=MAX_DATASET_NAME)
    path: str = Field(max_length=4096, description="An absolute path below a dataset root.")
    description: str = Field("", max_length=2000)
    visibility: DatasetVisibility | None = Field(
        None, description="For a new dataset (default private); an existing one keeps its own."
    )


class UploadStart(BaseModel):
    """A new version to be uploaded as a tar archive, in chunks."""

    name: str = Field(max_length=MAX_DATASET_NAME)
    size: int = Field(ge=1, description="Bytes of the whole archive.")
    description: str = Field("", max_length=2000)
    visibility: DatasetVisibility | None = None


class UploadView(BaseModel):
    """An upload session: send the bytes from ``offset`` on, then commit."""

    id: str
    dataset: str = Field(description="owner/name")
    version: int
    size: int
    offset: int = Field(description="Bytes received so far: the next chunk starts here.")
    state: VersionState


class DatasetShare(BaseModel):
    visibility: DatasetVisibility
