"""frozen_heap: the collector skips what was alive at a freeze, for the length of a pass."""

from __future__ import annotations

import gc

from gpuyard.scheduler.collector import frozen_heap


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_what_is_alive_is_frozen_for_the_pass_and_given_back_after() -> None:
    before = gc.get_freeze_count()
    with frozen_heap() as freeze:
        assert gc.get_freeze_count() > before
        kept = [object() for _ in range(100)]  # built during the pass, like a snapshot
        frozen = gc.get_freeze_count()
        freeze()
        assert gc.get_freeze_count() >= frozen + 1  # the list, at least
    assert gc.get_freeze_count() == 0
    assert kept


def test_the_collector_stays_on_and_collects_what_the_pass_makes() -> None:
    with frozen_heap():
        assert gc.isenabled()
        _Cycle()  # garbage made during the pass
        assert gc.collect() >= 1


def test_overlapping_passes_unfreeze_when_the_last_one_ends() -> None:
    with frozen_heap():
        with frozen_heap():
            pass
        assert gc.get_freeze_count() > 0  # the outer pass still holds its objects frozen
    assert gc.get_freeze_count() == 0
