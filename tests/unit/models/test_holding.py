"""What a placement holds, from the slots as stored (gpuyard.models.holding)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuyard.models.holding import gpus_text, held_gpus, slot_held_gpus


@pytest.mark.parametrize(
    ("slot", "held"),
    [
        ({"node": "n0", "gpus": [0, 1]}, 2),  # a shared slot holds what it lists
        ({"node": "n0", "gpus": [0], "exclusive": True, "held_gpus": 8}, 8),  # its whole node
        ({"node": "n0", "gpus": [0], "exclusive": True, "held_gpus": None}, 1),  # stored before
        ({"node": "n0", "gpus": [], "exclusive": True, "held_gpus": 0}, 0),  # a CPU node
        ({"node": "n0"}, 0),
    ],
)
def test_a_slot_holds_what_was_recorded_else_what_it_lists(slot: dict[str, Any], held: int) -> None:
    assert slot_held_gpus(slot) == held


def test_a_placement_holds_the_sum_of_its_slots_and_none_when_unplaced() -> None:
    whole = {"gpus": [0], "exclusive": True, "held_gpus": 4}
    assert held_gpus([whole, whole]) == 8
    assert held_gpus([]) is None
    assert held_gpus(None) is None


@pytest.mark.parametrize(
    ("requested", "held", "text"),
    [
        (2, 8, "2 (8 held)"),
        (2, 2, "2"),
        (2, None, "2"),  # not placed: nothing held yet
        (0, 0, "0"),
        (None, 8, "? (8 held)"),
        (None, None, "?"),
    ],
)
def test_the_text_shows_held_gpus_only_when_more_than_asked(
    requested: int | None, held: int | None, text: str
) -> None:
    assert gpus_text(requested, held) == text
