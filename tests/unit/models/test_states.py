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


def test_a_hold_drains_to_held_and_ends_as_it_would_have() -> None:
    from gpuyard.models.states import HELD_STATES, HOLD_TARGET, end_of_hold

    assert HOLD_TARGET == {JobState.HALTING: JobState.HELD}
    assert not set(HOLD_TARGET) & set(DRAIN_TARGET)
    for state in (JobState.HALTING, JobState.HELD, JobState.RESTARTING):
        assert state.holds_resources() and state.status is JobStatus.RUNNING
        assert not state.is_terminal()
    assert {JobState.HALTING, JobState.HELD} == HELD_STATES
    # In: a person's hold of a running (or starting, recovering) job; a failure kept.
    for source in (JobState.STARTING, JobState.RUNNING, JobState.RECOVERING):
        check_transition(1, source, JobState.HALTING)
    check_transition(1, JobState.RUNNING, JobState.HELD)  # every worker had already exited
    check_transition(1, JobState.HALTING, JobState.HELD)
    # Out: a person's start (in place, or back in the queue), a stop, the time limit.
    check_transition(1, JobState.HELD, JobState.RESTARTING)
    check_transition(1, JobState.RESTARTING, JobState.STARTING)
    check_transition(1, JobState.RESTARTING, JobState.SUSPENDED)
    for held in HELD_STATES:
        check_transition(1, held, end_of_hold(JobState.FAILED))
        check_transition(1, held, end_of_hold(JobState.STOPPED))
        check_transition(1, held, end_of_hold(None))
    assert end_of_hold(JobState.FAILED) is JobState.FAILING
    assert end_of_hold(JobState.STOPPED) is end_of_hold(None) is JobState.STOPPING


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobState.QUEUED, JobState.HALTING),
        (JobState.SUSPENDING, JobState.HALTING),
        (JobState.STOPPING, JobState.HELD),
        (JobState.FAILED, JobState.HELD),
        (JobState.HALTING, JobState.RESTARTING),  # started only once held
        (JobState.HELD, JobState.RUNNING),  # through restarting, as a new attempt
        (JobState.HELD, JobState.STOPPED),  # through stopping: exec workers may run
        (JobState.RESTARTING, JobState.HELD),
    ],
)
def test_held_jobs_move_only_as_the_table_says(current: JobState, target: JobState) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(3, current, target)
