"""The catalogue's one visibility rule and where a push lands (models/image_catalogue.py)."""

from __future__ import annotations

import pytest

from gpuyard.models.access import ANONYMOUS, Caller
from gpuyard.models.image import ImageRef
from gpuyard.models.image_catalogue import (
    CatalogueEntry,
    ImageVisibility,
    may_change,
    may_see,
    push_repository,
)

ALICE = Caller("alice", group="lab", group_id=1)
BOB_SAME_GROUP = Caller("bob", group="lab", group_id=1)
CAROL = Caller("carol", group="ops", group_id=2)
ADMIN = Caller("root", admin=True)
V = ImageVisibility


def _entry(visibility: ImageVisibility) -> CatalogueEntry:
    return CatalogueEntry(owner="alice", visibility=visibility, group_id=1)


@pytest.mark.parametrize(
    ("caller", "visibility", "seen"),
    [
        (ALICE, V.PRIVATE, True),
        (BOB_SAME_GROUP, V.PRIVATE, False),
        (CAROL, V.PRIVATE, False),
        (ADMIN, V.PRIVATE, True),
        (BOB_SAME_GROUP, V.GROUP, True),
        (CAROL, V.GROUP, False),
        (CAROL, V.PUBLIC, True),
        (CAROL, V.OFFICIAL, True),
        (ANONYMOUS, V.PUBLIC, False),
        (ANONYMOUS, V.OFFICIAL, False),
    ],
)
def test_catalogued_images_follow_their_visibility(
    caller: Caller, visibility: ImageVisibility, seen: bool
) -> None:
    assert may_see(caller, "alice/x", _entry(visibility)) is seen


def test_a_group_image_of_an_owner_without_a_group_reaches_no_one_else() -> None:
    entry = CatalogueEntry(owner="alice", visibility=V.GROUP, group_id=None)
    assert not may_see(Caller("dan"), "alice/x", entry)
    assert may_see(Caller("alice"), "alice/x", entry)


@pytest.mark.parametrize(
    ("caller", "repository", "seen"),
    [
        (ALICE, "alice/x", True),
        (ALICE, "alice/deep/x", True),
        (CAROL, "alice/x", False),
        (CAROL, "official/pytorch", True),
        (CAROL, "x", False),
        (CAROL, "team/x", False),
        (ADMIN, "team/x", True),
        (ANONYMOUS, "official/pytorch", False),
    ],
)
def test_images_outside_the_catalogue_belong_to_their_first_component(
    caller: Caller, repository: str, seen: bool
) -> None:
    assert may_see(caller, repository, None) is seen


def test_only_the_owner_or_an_admin_changes_an_entry() -> None:
    entry = _entry(V.PUBLIC)
    assert may_change(ALICE, entry) and may_change(ADMIN, entry)
    assert not may_change(BOB_SAME_GROUP, entry) and not may_change(ANONYMOUS, entry)


@pytest.mark.parametrize(
    ("caller", "name", "lands"),
    [
        (ALICE, "x:1", "alice/x:1"),
        (ALICE, "alice/x:1", "alice/x:1"),
        (ALICE, "alice/a/b:2", "alice/a/b:2"),
        (ADMIN, "official/pytorch:2.13", "official/pytorch:2.13"),
        (ADMIN, "x", "root/x:latest"),
    ],
)
def test_a_push_lands_in_the_callers_namespace(caller: Caller, name: str, lands: str) -> None:
    assert str(push_repository(caller, ImageRef.parse(name))) == lands


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("official/x:1", "only admins push official"),
        ("bob/x:1", "write alice/NAME:TAG, not bob/x"),
        ("host.example/x:1", "by name and tag"),
        (f"x@sha256:{'a' * 64}", "by name and tag"),
    ],
)
def test_a_push_elsewhere_is_refused_saying_where(name: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        push_repository(ALICE, ImageRef.parse(name))


@pytest.mark.parametrize("name", ["official/pytorch:2.13", "pytorch:2.13"])
def test_a_user_named_official_does_not_own_the_official_namespace(name: str) -> None:
    with pytest.raises(ValueError, match="only admins push official"):
        push_repository(Caller("official"), ImageRef.parse(name))


def test_a_user_name_that_cannot_be_a_namespace_is_told_so() -> None:
    with pytest.raises(ValueError, match="cannot name a repository"):
        push_repository(Caller("Alice.Smith"), ImageRef.parse("x:1"))
