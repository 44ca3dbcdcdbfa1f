"""Data preparation's pure rules: which copies a node's data cache drops, how the phase's
progress reads, and which mounts may ask for it (docs/datasets.md, "Data preparation")."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuyard.models.dataprep import CachedCopy, copy_key, preparing, to_evict
from gpuyard.models.job import Mount, Mounts

DAY = 86400.0
GiB = 1 << 30
NOW = 100 * DAY


def copy(key: str, size_gib: int, idle_days: float, *, pinned: bool = False) -> CachedCopy:
    return CachedCopy(key, size_gib * GiB, NOW - idle_days * DAY, pinned)


EVICTION = [
    # (copies, retention days, cap GiB, incoming GiB, evicted)
    pytest.param([copy("a", 1, 1), copy("b", 1, 2)], 7, 100, 0, [], id="fresh-and-under-cap"),
    pytest.param([copy("a", 1, 8), copy("b", 1, 2)], 7, 100, 0, ["a"], id="stale"),
    pytest.param([copy("a", 1, 7)], 7, 100, 0, ["a"], id="exactly-the-retention-is-stale"),
    pytest.param([copy("a", 1, 30, pinned=True)], 7, 100, 0, [], id="pinned-never-stale"),
    pytest.param(
        [copy("a", 4, 3), copy("b", 4, 1), copy("c", 4, 2)], 7, 10, 0, ["a"], id="lru-to-the-cap"
    ),
    pytest.param(
        [copy("a", 4, 3), copy("b", 4, 1), copy("c", 4, 2)], 7, 10, 4, ["a", "c"], id="incoming"
    ),
    pytest.param(
        [copy("a", 4, 3, pinned=True), copy("b", 4, 1)], 7, 4, 0, ["b"], id="pinned-skipped"
    ),
    pytest.param(
        [copy("a", 4, 3, pinned=True), copy("b", 4, 1, pinned=True)],
        7,
        4,
        0,
        [],
        id="all-pinned-over-the-cap",
    ),
    pytest.param(
        [copy("old", 2, 9), copy("a", 4, 3), copy("b", 4, 1)], 7, 6, 0, ["old", "a"], id="both"
    ),
    pytest.param([copy("small", 1, 2), copy("big", 5, 2)], 7, 3, 0, ["big"], id="tie-larger-first"),
]


@pytest.mark.parametrize(("copies", "retention", "cap", "incoming", "evicted"), EVICTION)
def test_to_evict(
    copies: list[CachedCopy], retention: float, cap: int, incoming: int, evicted: list[str]
) -> None:
    assert (
        to_evict(
            copies,
            now=NOW,
            retention=retention * DAY,
            max_bytes=cap * GiB,
            incoming=incoming * GiB,
        )
        == evicted
    )


@pytest.mark.parametrize(
    ("done", "total", "text"),
    [
        (int(3.1 * GiB), 12 * GiB, "preparing data: 3.1 of 12 GiB"),
        (0, 12 * GiB, "preparing data: 0 of 12 GiB"),
        (5 << 20, 300 << 20, "preparing data: 5 of 300 MiB"),
        (10, 100, "preparing data: 10 of 100 bytes"),
    ],
)
def test_progress_reads_in_the_totals_unit(done: int, total: int, text: str) -> None:
    assert preparing(done, total) == text


def test_copy_key_names_version_and_digest() -> None:
    assert copy_key(12, "sha256:" + "ab" * 32) == "v12-abababababababab"
    assert copy_key(12, "sha256:" + "ab" * 32) != copy_key(12, "sha256:" + "cd" * 32)


def test_prepare_on_a_catalogued_dataset_is_read_only() -> None:
    mounts = Mounts(datasets=[Mount(name="d", dataset="imagenet@3", prepare=True)])
    assert mounts.datasets[0].prepare
    assert mounts.datasets[0].readonly


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"path": "/data/x", "prepare": True}, "mount it with `dataset: NAME@VERSION`"),
        ({"dataset": "x@1", "prepare": True, "readonly": False}, "set readonly: true"),
    ],
)
def test_prepare_refused_with_what_to_change(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=r"prepare") as caught:
        Mount(name="d", **fields)  # type: ignore[arg-type]
    assert says in str(caught.value)


def test_prepare_refused_on_volumes() -> None:
    with pytest.raises(ValidationError, match="prepare"):
        Mounts(volumes=[Mount(name="v", path="/scratch", readonly=False, prepare=True)])


def test_prepare_data_flag_marks_every_dataset_flag() -> None:
    from gpuyard.cli.specfile import parse_dataset_flags

    assert parse_dataset_flags(["mnist@3", "alice/imagenet:img"], prepare=True) == [
        {"name": "mnist", "dataset": "mnist@3", "prepare": True},
        {"name": "img", "dataset": "alice/imagenet", "prepare": True},
    ]
    # A directory with the flag reaches the spec's rule, which says what to change.
    (raw,) = parse_dataset_flags(["raw=/data/raw"], prepare=True)
    with pytest.raises(ValidationError, match="make the path a dataset"):
        Mount.model_validate(raw)
