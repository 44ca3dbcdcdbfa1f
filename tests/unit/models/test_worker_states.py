"""Worker states: the transition table, its legal moves and a refused one, the roles."""

from __future__ import annotations

import pytest

from gpuyard.errors import IllegalTransition
from gpuyard.models.worker import (
    WORKER_TRANSITIONS,
    WorkerKey,
    WorkerRole,
    WorkerState,
    check_worker_transition,
)

LEGAL = [
    (WorkerState.PENDING, WorkerState.RUNNING),  # launched
    (WorkerState.PENDING, WorkerState.LOST),  # its launch failed; the controller gave up
    (WorkerState.PENDING, WorkerState.CANCELLED),  # its job ended before it was launched
    (WorkerState.RUNNING, WorkerState.EXITED),  # its supervisor recorded the exit
    (WorkerState.RUNNING, WorkerState.LOST),  # it vanished; the controller gave up
]


def test_the_table_has_every_state_and_only_the_legal_moves() -> None:
    assert set(WORKER_TRANSITIONS) == set(WorkerState)
    moves = {(a, b) for a, targets in WORKER_TRANSITIONS.items() for b in targets}
    assert moves == set(LEGAL)


@pytest.mark.parametrize(("current", "target"), LEGAL)
def test_every_legal_move_is_allowed(current: WorkerState, target: WorkerState) -> None:
    check_worker_transition(3, current, target)


def test_an_ended_worker_never_changes_and_ended_means_no_move() -> None:
    for state in WorkerState:
        assert (WORKER_TRANSITIONS[state] == frozenset()) == state.is_ended()


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (WorkerState.EXITED, WorkerState.RUNNING),
        (WorkerState.LOST, WorkerState.EXITED),
        (WorkerState.CANCELLED, WorkerState.RUNNING),
        (WorkerState.RUNNING, WorkerState.CANCELLED),
        (WorkerState.RUNNING, WorkerState.PENDING),
        (WorkerState.PENDING, WorkerState.EXITED),
    ],
)
def test_illegal_moves_raise_a_typed_error(current: WorkerState, target: WorkerState) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_worker_transition(WorkerKey(7, 1, 2), current, target)
    assert info.value.status_code == 409
    assert "job 7 attempt 1 worker 2" in info.value.detail
    assert info.value.extra == {"state": current.value, "target": target.value}


def test_roles_keep_their_wire_values_and_which_decide_the_job() -> None:
    assert [r.value for r in WorkerRole] == [
        "worker",
        "launcher",
        "mpi-target",
        "ps",
        "check",
        "exec",
        "shell",
    ]
    assert {r for r in WorkerRole if r.primary} == {WorkerRole.WORKER, WorkerRole.LAUNCHER}
