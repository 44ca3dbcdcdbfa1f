"""Prepared data and the scheduler (docs/datasets.md, "Data preparation"): among nodes
otherwise equally good, placement takes the one holding more of a job's prepared dataset
versions; the prediction of a job's start counts the copy of what its nodes lack."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from gpuyard.scheduler import (
    COPY_RATE,
    DataNeed,
    Decisions,
    NodeCapacity,
    PendingJob,
    RunningJob,
    Snapshot,
    decide,
)
from gpuyard.scheduler.locality import copy_seconds, preferred
from gpuyard.scheduler.predict import forecast, in_words, predict
from gpuyard.testing.builders import alloc, job, node, running, snapshot

GB = 10**9
V1 = DataNeed(version=1, size=10 * GB)
V2 = DataNeed(version=2, size=30 * GB)
IMAGE = "sha256:" + "a" * 64


def on(decisions: Decisions) -> dict[int, list[str]]:
    return {s.job_id: [a.node for a in s.allocations] for s in decisions.starts}


def holding(name: str, *versions: int, image: str = "", **kwargs: Any) -> NodeCapacity:
    return replace(
        node(name, **kwargs),
        datasets=frozenset(versions),
        images=frozenset({image} - {""}),
    )


def preparing(job_id: int, *needs: DataNeed, image: str = "", **kwargs: Any) -> PendingJob:
    return replace(job(job_id, **kwargs), datasets=needs, image=image)


@dataclass(frozen=True)
class Case:
    name: str
    nodes: list[NodeCapacity]
    pending: list[PendingJob]
    expected: dict[int, list[str]]
    running: tuple[RunningJob, ...] = ()


PLACEMENT = [
    Case(
        "equal nodes: the holder wins",
        [node("a"), holding("b", 1), node("c")],
        [preparing(1, V1, gpus=2)],
        {1: ["b"]},
    ),
    Case(
        "more bytes held wins",
        [holding("a", 1), holding("b", 2), holding("c", 1)],
        [preparing(1, V1, V2, gpus=2)],
        {1: ["b"]},
    ),
    Case(
        "both versions beat one",
        [holding("a", 2), holding("b", 1, 2)],
        [preparing(1, V1, V2, gpus=2)],
        {1: ["b"]},
    ),
    Case(
        "data before the image",
        [holding("a", image=IMAGE), holding("b", 1)],
        [preparing(1, V1, image=IMAGE, gpus=2)],
        {1: ["b"]},
    ),
    Case(
        "the image breaks a tie of data",
        [holding("a", 1), holding("b", 1, image=IMAGE)],
        [preparing(1, V1, image=IMAGE, gpus=2)],
        {1: ["b"]},
    ),
    Case(
        "a holder of another version is no better",
        [node("a"), holding("b", 7)],
        [preparing(1, V1, gpus=2)],
        {1: ["a"]},
    ),
    Case(
        "a worse fit under the existing rule: best fit wins",
        # "a" and "c" have 2 GPUs free (6 taken), "b" is empty and holds the data: "a" is
        # the tightest fit, and the first.
        [node("a"), holding("b", 1), node("c")],
        [preparing(1, V1, gpus=2)],
        {1: ["a"]},
        (running(9, alloc("a", 6)), running(8, alloc("c", 6))),
    ),
    Case(
        "a worse fit on named nodes (the scanning path): best fit wins",
        [node("a"), holding("b", 1)],
        [preparing(1, V1, gpus=2, only=["a", "b"])],
        {1: ["a"]},
        (running(9, alloc("a", 6)),),
    ),
    Case(
        "equal named nodes: the holder wins",
        [node("a"), holding("b", 1)],
        [preparing(1, V1, gpus=2, only=["a", "b"])],
        {1: ["b"]},
    ),
    Case(
        "no prepared mounts: unchanged",
        [node("a"), holding("b", 1)],
        [job(1, gpus=2)],
        {1: ["a"]},
    ),
    Case(
        "a gang takes the holders first",
        [node("a"), holding("b", 1), node("c"), holding("d", 1, 2)],
        [preparing(1, V1, V2, gpus=8, nodes=2)],
        {1: ["d", "b"]},
    ),
    Case(
        "a gang never takes a larger node for the data",
        [node("a"), node("b"), holding("c", 1, gpus=16), holding("d", 1, gpus=16)],
        [preparing(1, V1, gpus=8, nodes=2)],
        {1: ["a", "b"]},
    ),
]


@pytest.mark.parametrize("case", PLACEMENT, ids=lambda c: c.name)
def test_placement_prefers_the_nodes_holding_the_data(case: Case) -> None:
    decisions = decide(snapshot(case.nodes, case.pending, list(case.running)))
    placed = on(decisions)
    assert {k: sorted(v) for k, v in placed.items()} == {
        k: sorted(v) for k, v in case.expected.items()
    }


def test_the_data_never_overrides_priority() -> None:
    from gpuyard.models import Priority

    nodes = [holding("a", 1, gpus=2)]
    pending = [preparing(1, V1, gpus=2), job(2, gpus=2, priority=Priority.HIGH)]
    assert on(decide(snapshot(nodes, pending))) == {2: ["a"]}


def test_scores_add_up_the_bytes_held_then_the_image() -> None:
    found = preferred({0, 3}, [({0, 1}, 10), ({1, 2}, 30)])
    assert found.scores == {0: (10, 1), 1: (40, 0), 2: (30, 0), 3: (0, 1)}
    assert found.top == (40, 0)
    assert sorted(range(5), key=found.rank) == [1, 2, 0, 3, 4]


COPIES = [
    # (needs, versions held by each node of the placement, seconds at 1 GB/s)
    ((), [frozenset()], 0.0),
    ((V1,), [frozenset()], 10.0),
    ((V1,), [frozenset({1})], 0.0),
    ((V1, V2), [frozenset({1})], 30.0),
    ((V1, V2), [frozenset({1, 2}), frozenset({2})], 10.0),  # the most lacking node sets it
    ((V1, V2), [frozenset({1}), frozenset({2})], 30.0),
]


@pytest.mark.parametrize(("needs", "held", "seconds"), COPIES)
def test_the_copy_takes_what_the_most_lacking_node_misses(
    needs: tuple[DataNeed, ...], held: list[frozenset[int]], seconds: float
) -> None:
    assert copy_seconds(needs, held, GB) == seconds


def test_a_rate_of_nothing_is_taken_as_the_default() -> None:
    assert copy_seconds((V1,), [frozenset()], 0.0) == V1.size / COPY_RATE


def rated(s: Snapshot, rate: float = GB) -> Snapshot:
    return replace(s, copy_rate=rate)


def test_a_job_placed_now_starts_once_its_data_is_copied() -> None:
    f = predict(rated(snapshot([node("a")], [preparing(1, V1, V2, gpus=2)])), 1)
    assert (f.now, f.start_at, f.copy) == (True, 40.0, 40.0)
    assert in_words(f, 0.0) == "starts now, its data copied first (about 40s)"


def test_nodes_holding_the_data_need_no_copy() -> None:
    f = predict(rated(snapshot([holding("a", 1, 2)], [preparing(1, V1, V2, gpus=2)])), 1)
    assert (f.now, f.start_at, f.copy) == (True, 0.0, 0.0)
    assert in_words(f, 0.0) == "starts now"


def test_a_later_start_counts_the_copy_on_the_nodes_it_gets() -> None:
    s = snapshot(
        [holding("a", 1, gpus=4)],
        [preparing(1, V1, V2, gpus=4)],
        [running(9, alloc("a", 2), max_runtime=300)],
    )
    f = predict(rated(s), 1)
    assert (f.start_at, f.copy) == (330.0, 30.0)  # placed at 300, V2 (30 GB) to copy
    assert in_words(f, 0.0) == "starts in about 5m30s, its data copied first (about 30s)"


def test_without_prepared_data_the_prediction_is_unchanged() -> None:
    s = snapshot([node("a")], [job(1, gpus=2)])
    assert predict(rated(s), 1) == predict(s, 1)
    assert predict(s, 1).copy == 0.0


def test_a_forecast_counts_each_jobs_copy() -> None:
    s = rated(
        snapshot([node("a", gpus=2)], [preparing(1, V1, gpus=2, max_runtime=100), job(2, gpus=2)])
    )
    found = forecast(s)
    assert (found[1].start_at, found[1].copy) == (10.0, 10.0)
    # The copy is part of job 1's run (its max runtime counts from its placement).
    assert (found[2].start_at, found[2].copy) == (100.0, 0.0)


def test_a_reserved_job_expects_its_copy_too() -> None:
    s = snapshot(
        [node("a", gpus=4)],
        [preparing(1, V1, gpus=4)],
        [running(9, alloc("a", 2), max_runtime=300)],
    )
    wait = decide(rated(s)).waits[1]
    assert wait.start_at == 310.0
    assert wait.message.endswith(
        "expected to start in about 5m10s (its data copied first, about 10s)"
    )
