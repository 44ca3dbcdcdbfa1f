"""Job states: the transition table, the visible statuses, typed errors."""

from __future__ import annotations

import pytest

from gpuyard.errors import IllegalTransition
from gpuyard.models import JobState, JobStatus
from gpuyard.models.states import DRAIN_TARGET, TRANSITIONS, check_transition


def test_visible_statuses_are_the_reference_six() -> None:
    assert [s.label for s in JobStatus] == [
        "queued",
        "running",
        "error",
        "stopped",
        "expired",
        "succeeded",
    ]


def test_every_state_maps_to_one_visible_status_and_terminality_agrees() -> None:
    for state in JobState:
        assert state.status in JobStatus
        assert state.is_terminal() == state.status.is_terminal()
        assert (TRANSITIONS[state] == frozenset()) == state.is_terminal()


def test_every_state_is_reachable_from_queued() -> None:
    seen, frontier = {JobState.QUEUED}, [JobState.QUEUED]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(JobState)


def test_draining_states_end_in_their_terminal_state() -> None:
    for draining, terminal in DRAIN_TARGET.items():
        assert terminal in TRANSITIONS[draining]
        assert draining.holds_resources() and not terminal.holds_resources()


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobState.SUCCEEDED, JobState.RUNNING),
        (JobState.QUEUED, JobState.RUNNING),
        (JobState.STOPPED, JobState.QUEUED),
        (JobState.STOPPING, JobState.EXPIRED),
    ],
)
def test_illegal_moves_raise_a_typed_error(current: JobState, target: JobState) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(7, current, target)
    assert info.value.status_code == 409
    assert "job 7" in info.value.detail


def test_status_parse_accepts_the_error_label() -> None:
    assert JobStatus.parse("error") is JobStatus.FAILED
    assert JobStatus.parse(" Running ") is JobStatus.RUNNING
    with pytest.raises(ValueError, match="choose one of queued, running, error"):
        JobStatus.parse("done")
