"""Placement prefers, among nodes otherwise equally good, those whose cache holds the job's
image (docs/images.md); it never overrides a better fit, priority or the gang's rules."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuyard.models import Priority
from gpuyard.scheduler import (
    Decisions,
    Member,
    NodeCapacity,
    PendingJob,
    PoolPolicy,
    Request,
    decide,
)
from gpuyard.testing.builders import alloc, job, node, running, snapshot

IMAGE = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


def on(decisions: Decisions) -> dict[int, list[str]]:
    return {s.job_id: [a.node for a in s.allocations] for s in decisions.starts}


def holding(name: str, *digests: str, **kwargs: Any) -> NodeCapacity:
    return replace(node(name, **kwargs), images=frozenset(digests))


def in_image(job_id: int, digest: str = IMAGE, **kwargs: Any) -> PendingJob:
    return replace(job(job_id, **kwargs), image=digest)


def test_of_equal_nodes_the_one_holding_the_image_is_chosen() -> None:
    nodes = [node("a"), node("b"), holding("c", IMAGE), node("d")]
    assert on(decide(snapshot(nodes, [in_image(1, gpus=2)]))) == {1: ["c"]}


def test_a_node_holding_another_image_is_no_better() -> None:
    nodes = [node("a"), holding("b", OTHER)]
    assert on(decide(snapshot(nodes, [in_image(1, gpus=2)]))) == {1: ["a"]}


def test_without_an_image_placement_is_unchanged() -> None:
    nodes = [node("a"), holding("b", IMAGE)]
    assert on(decide(snapshot(nodes, [job(1, gpus=2)]))) == {1: ["a"]}


def test_a_tighter_fit_wins_over_the_image() -> None:
    # "a" has 2 GPUs free (6 taken), "b" is empty but holds the image: best fit stays "a".
    nodes = [node("a"), holding("b", IMAGE)]
    snap = snapshot(nodes, [in_image(1, gpus=2)], [running(9, alloc("a", 6))])
    assert on(decide(snap)) == {1: ["a"]}


def test_a_tighter_fit_wins_when_nodes_are_named() -> None:
    # Naming nodes takes the scanning path: the same rule, the image only breaks ties.
    nodes = [node("a"), holding("b", IMAGE), holding("c", IMAGE)]
    snap = snapshot(nodes, [in_image(1, gpus=2, only=["a", "b", "c"])], [running(9, alloc("a", 6))])
    assert on(decide(snap)) == {1: ["a"]}
    equal = snapshot(nodes, [in_image(1, gpus=2, only=["a", "c"])])
    assert on(decide(equal)) == {1: ["c"]}


def test_the_image_never_overrides_priority() -> None:
    # One node's room: the higher tier gets it, wherever the image is.
    nodes = [holding("a", IMAGE, gpus=2)]
    pending = [in_image(1, gpus=2), job(2, gpus=2, priority=Priority.HIGH)]
    assert on(decide(snapshot(nodes, pending))) == {2: ["a"]}


def test_a_gang_takes_the_nodes_holding_the_image_first() -> None:
    nodes = [node("a"), node("b"), holding("c", IMAGE), holding("d", IMAGE)]
    gang = in_image(1, gpus=8, nodes=2)
    assert sorted(on(decide(snapshot(nodes, [gang])))[1]) == ["c", "d"]


def test_a_gang_keeps_to_one_zone_whatever_the_image() -> None:
    nodes = [
        node("a", zone="z1"),
        node("b", zone="z1"),
        holding("c", IMAGE, zone="z2"),
        node("d", zone="z3"),
    ]
    snap = snapshot(nodes, [in_image(1, gpus=8, nodes=2)], pools=[PoolPolicy(same_zone=True)])
    assert sorted(on(decide(snap))[1]) == ["a", "b"]


def test_an_image_held_on_more_nodes_than_are_equally_good_walks_those_nodes() -> None:
    # More nodes hold the image (c, d are in another pool) than have "a"'s free GPUs here.
    nodes = [
        node("a"),
        holding("b", IMAGE),
        holding("c", IMAGE, pool="other"),
        holding("d", IMAGE, pool="other"),
    ]
    assert on(decide(snapshot(nodes, [in_image(1, gpus=2)]))) == {1: ["b"]}


def test_a_gang_of_unlike_members_takes_the_nodes_holding_the_image_first() -> None:
    nodes = [node("a", gpus=4), node("b"), holding("c", IMAGE, gpus=4), holding("d", IMAGE)]
    gang = replace(
        in_image(1),
        request=Request(
            (Member(gpus=8, cpus=1, whole_node=True), Member(gpus=4, cpus=1, whole_node=True))
        ),
    )
    assert sorted(on(decide(snapshot(nodes, [gang])))[1]) == ["c", "d"]
