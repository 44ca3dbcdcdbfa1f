"""Slurm host lists: expansion, compression and refusing hostile or malformed input."""

from __future__ import annotations

import pytest

from gpuyard.hostlist import MAX_HOSTS, compress_hostlist, expand_hostlist
from gpuyard.slurm.render import hostlist_ranged


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("n[0001-0003,0010]", ["n0001", "n0002", "n0003", "n0010"]),
        ("n[0001-0002],gpu7", ["n0001", "n0002", "gpu7"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("x", ["x"]),
        ("n1,n1", ["n1", "n1"]),
        ("a b,c", ["a", "b", "c"]),
        ("", []),
        ("n[5]", ["n5"]),
    ],
)
def test_expand(text: str, names: list[str]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n[3-1]", "3-1"),
        ("n[1-2", "unbalanced"),
        ("n1-2]", "unbalanced"),
        ("n[a-b]", "a-b"),
        ("n[1-2]x", "after"),
        ("n[[1-2]]", "nested"),
        ("n[]", "''"),
        ("n[1,,2]", "''"),
    ],
)
def test_expand_refuses_malformed(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="invalid hostlist") as caught:
        expand_hostlist(text)
    assert message in str(caught.value)


def test_expand_caps_size_before_building() -> None:
    with pytest.raises(ValueError, match="more than 100000"):
        expand_hostlist("n[0-99999999999]")
    with pytest.raises(ValueError, match="more than 10 names"):
        expand_hostlist("a[1-5],b[1-6]", limit=10)
    assert len(expand_hostlist(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS


@pytest.mark.parametrize(
    "names",
    [
        ["n0001", "n0002", "n0003", "n0010"],
        ["gpu7", "n0001", "n0002"],
        ["n9", "n10", "n11"],
        ["x"],
        [f"node{i:03d}" for i in range(0, 300, 7)],
    ],
)
def test_compress_round_trips(names: list[str]) -> None:
    assert sorted(expand_hostlist(compress_hostlist(names))) == sorted(names)
    assert sorted(expand_hostlist(hostlist_ranged(names))) == sorted(names)


def test_compress_sorts_and_groups() -> None:
    assert compress_hostlist(["n0003", "n0001", "n0002", "x", "n0010"]) == "n[0001-0003,0010],x"
    assert compress_hostlist(["n9", "n10"]) == "n[9-10]"
    assert compress_hostlist([]) == ""


def test_ranged_keeps_order_like_scontrol() -> None:
    assert hostlist_ranged(["n0003", "n0001", "n0002", "n0010", "gpu7", "gpu8", "x"]) == (
        "n[0003,0001-0002,0010],gpu[7-8],x"
    )
    assert hostlist_ranged(["n1", "gpu1", "n2"]) == "n1,gpu1,n2"
    assert hostlist_ranged(["n9", "n10", "n11", "n09", "n010"]) == "n[9-11,09,010]"
    assert hostlist_ranged(["n1", "n1", "n2", "n1", "n2", "n3"]) == "n[1,1-2,1-3]"
