"""What the controller puts on the scheduler's snapshot of the nodes' dataset copies: the
executor's view, read again after a while or after a preparation, and the measured copy
rate (docs/datasets.md, "Data preparation")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuyard.clock import ManualClock
from gpuyard.controller.data_locality import HELD_EVERY, RATES_KEPT, DataLocality
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.dataprep import copy_key
from gpuyard.scheduler import COPY_RATE
from gpuyard.testing.builders import node, snapshot

GB = 10**9


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_the_executors_copies_reach_the_snapshots_nodes(clock: ManualClock) -> None:
    executor = FakeExecutor()
    executor.data_copies["b", copy_key(7, "sha256:" + "c" * 64)] = set()
    executor.data_copies["b", "not-a-copy"] = set()
    found = DataLocality(executor, clock).apply(snapshot([node("a"), node("b")], []))
    assert [(n.name, n.datasets) for n in found.nodes] == [("a", frozenset()), ("b", {7})]
    assert found.copy_rate == COPY_RATE


def test_the_view_is_read_again_after_a_while_or_a_preparation(clock: ManualClock) -> None:
    executor = FakeExecutor()
    locality = DataLocality(executor, clock)
    assert locality.held() == {}
    executor.data_copies["a", copy_key(1, "")] = set()
    assert locality.held() == {}  # still the view read a moment ago
    clock.advance(HELD_EVERY)
    assert locality.held() == {"a": {1}}
    executor.data_copies["a", copy_key(2, "")] = set()
    locality.copied(0, 0.0)  # a job used a node's copy: read again
    assert locality.held() == {"a": {1, 2}}


def test_a_node_that_no_longer_holds_a_copy_loses_it_on_the_snapshot(clock: ManualClock) -> None:
    had = replace(node("a"), datasets=frozenset({3}))
    after = DataLocality(FakeExecutor(), clock).apply(snapshot([had], []))
    assert after.nodes[0].datasets == frozenset()


@pytest.mark.parametrize(
    ("copies", "rate"),
    [
        ([], COPY_RATE),
        ([(10 * GB, 20.0)], 0.5 * GB),
        ([(10 * GB, 20.0), (30 * GB, 20.0)], 1.0 * GB),
        ([(10 * GB, 0.5)], COPY_RATE),  # too short to time
        ([(0, 20.0)], COPY_RATE),  # a copy used, not made
        ([(1 * GB, 1.0)] + [(4 * GB, 2.0)] * RATES_KEPT, 2.0 * GB),  # the last ones only
    ],
)
def test_the_rate_is_that_of_the_last_copies_long_enough_to_time(
    clock: ManualClock, copies: list[tuple[int, float]], rate: float
) -> None:
    locality = DataLocality(FakeExecutor(), clock)
    for size, seconds in copies:
        locality.copied(size, seconds)
    assert locality.rate == rate
    assert locality.apply(snapshot([node("a")], [])).copy_rate == rate
