"""The dataset catalogue's types: refs, names, the manifest's digest, version moves, the
visibility rule, a job's dataset mounts, and the `--dataset` flag."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuyard.cli.specfile import parse_dataset_flags
from gpuyard.errors import IllegalTransition, InvalidSpec
from gpuyard.models.access import Caller
from gpuyard.models.dataset import (
    DatasetRef,
    DatasetVisibility,
    Manifest,
    ManifestFile,
    VersionState,
    check_dataset_name,
    check_move,
    may_change,
    may_see,
)
from gpuyard.models.job import JobSpec, Mounts

SHA = "0" * 64


@pytest.mark.parametrize(
    ("text", "owner", "name", "version", "shown"),
    [
        ("mnist", None, "mnist", None, "mnist@latest"),
        ("mnist@latest", None, "mnist", None, "mnist@latest"),
        ("mnist@3", None, "mnist", 3, "mnist@3"),
        ("alice/mnist@12", "alice", "mnist", 12, "alice/mnist@12"),
        ("alice/img-net.v2", "alice", "img-net.v2", None, "alice/img-net.v2@latest"),
    ],
)
def test_refs_parse_and_print(
    text: str, owner: str | None, name: str, version: int | None, shown: str
) -> None:
    ref = DatasetRef.parse(text)
    assert (ref.owner, ref.name, ref.version) == (owner, name, version)
    assert str(ref) == shown
    assert DatasetRef.parse(str(ref)) == ref


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("mnist@0", "a number from 1"),
        ("mnist@-1", "a number from 1"),
        ("mnist@v2", "a number from 1"),
        ("mnist@", "a number from 1"),
        ("..", "not '.', '..'"),
        ("alice/manifest@2", "'manifest'"),
        ("a/b/c", "is not a user name|dataset name"),
        ("/mnist", "is not a user name"),
        ("mn ist", "dataset name"),
        ("", "dataset name"),
    ],
)
def test_bad_refs_say_what_a_ref_is(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        DatasetRef.parse(text)
    assert "NAME@VERSION" in str(refused.value)


@pytest.mark.parametrize("name", ["mnist", "a.b-c_d", "x" * 128, "v1"])
def test_names_of_the_mount_charset_are_taken(name: str) -> None:
    assert check_dataset_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "manifest", "favourite", "a/b", "a b", "x" * 129, "naïve", "a\x00"]
)
def test_other_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="dataset name"):
        check_dataset_name(name)


def test_the_manifest_digest_is_canonical_and_changes_with_any_file() -> None:
    a = ManifestFile(path="a", size=1, sha256=SHA)
    b = ManifestFile(path="dir/b", size=2, sha256="1" * 64)
    one = Manifest(files=[a, b])
    assert one.size == 3
    assert one.digest() == Manifest(files=[b, a]).digest()
    assert one.digest().startswith("sha256:")
    changed = Manifest(files=[a, b.model_copy(update={"sha256": "2" * 64})])
    assert changed.digest() != one.digest()
    assert Manifest(files=[a]).digest() != one.digest()
    with pytest.raises(ValidationError):
        ManifestFile(path="a", size=-1, sha256=SHA)


def test_versions_move_only_forward_and_ready_is_final() -> None:
    check_move(VersionState.UPLOADING, VersionState.HASHING)
    check_move(VersionState.HASHING, VersionState.READY)
    check_move(VersionState.HASHING, VersionState.FAILED)
    for old, new in [
        (VersionState.READY, VersionState.HASHING),
        (VersionState.FAILED, VersionState.READY),
        (VersionState.UPLOADING, VersionState.READY),
    ]:
        with pytest.raises(IllegalTransition):
            check_move(old, new)
    assert VersionState.READY.is_terminal() and not VersionState.HASHING.is_terminal()


ALICE = Caller("alice", group="lab", group_id=1)
GINA = Caller("gina", group="lab", group_id=1)
OTTO = Caller("otto", group="ops", group_id=2)
ADA = Caller("ada", admin=True)
NOBODY = Caller("")


@pytest.mark.parametrize(
    ("visibility", "seen_by"),
    [
        (DatasetVisibility.PRIVATE, {"alice", "ada"}),
        (DatasetVisibility.GROUP, {"alice", "gina", "ada"}),
        (DatasetVisibility.PUBLIC, {"alice", "gina", "otto", "ada"}),
    ],
)
def test_who_sees_a_dataset(visibility: DatasetVisibility, seen_by: set[str]) -> None:
    callers = [ALICE, GINA, OTTO, ADA, NOBODY]
    seeing = {
        c.name
        for c in callers
        if may_see(c, owner="alice", visibility=visibility, group_id=ALICE.group_id)
    }
    assert seeing == seen_by
    assert {c.name for c in callers if may_change(c, owner="alice")} == {"alice", "ada"}


def test_mine_is_private() -> None:
    assert DatasetVisibility.parse("mine") is DatasetVisibility.PRIVATE
    with pytest.raises(ValueError, match="mine"):
        DatasetVisibility.parse("official")


def test_a_dataset_mount_needs_no_path_is_read_only_and_is_for_datasets_only() -> None:
    mounts = Mounts.model_validate(
        {"datasets": [{"name": "d", "dataset": "mnist@2", "readonly": False}]}
    )
    (mount,) = mounts.datasets
    assert (mount.dataset, mount.path, mount.readonly) == ("mnist@2", "", True)
    old = Mounts.model_validate({"datasets": [{"name": "d", "path": "/data/x", "readonly": False}]})
    assert old.datasets[0].readonly is False  # a path keeps what it asked for
    with pytest.raises(ValidationError, match="give its path"):
        Mounts.model_validate({"datasets": [{"name": "d"}]})
    with pytest.raises(ValidationError, match="mount it under datasets"):
        Mounts.model_validate({"models": [{"name": "m", "dataset": "mnist"}]})
    with pytest.raises(ValidationError, match="dataset_version is the pool's"):
        Mounts.model_validate({"datasets": [{"name": "d", "path": "/x", "dataset_version": 3}]})
    with pytest.raises(ValidationError, match="a number from 1"):
        Mounts.model_validate({"datasets": [{"name": "d", "dataset": "mnist@x"}]})
    JobSpec.model_validate(
        {"command": "true", "mounts": {"datasets": [{"name": "d", "dataset": "x"}]}}
    )


def test_the_dataset_flag_takes_a_path_or_a_ref() -> None:
    assert parse_dataset_flags(["raw=/data/raw:rw", "mnist@3", "alice/imagenet:img"]) == [
        {"name": "raw", "path": "/data/raw", "readonly": False},
        {"name": "mnist", "dataset": "mnist@3"},
        {"name": "img", "dataset": "alice/imagenet"},
    ]
    with pytest.raises(InvalidSpec, match="OWNER/"):
        parse_dataset_flags(["alice/"])
