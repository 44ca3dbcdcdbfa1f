"""`gpuyard exec` requests and keep_failed: bad input is refused with what to do instead."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuyard.models import ExecKill, ExecRun, ExecStop, ExecTarget, FaultTolerance


def test_a_run_takes_a_command_only_for_its_command_target() -> None:
    assert ExecRun(command=["hostname"]).target is ExecTarget.COMMAND
    assert ExecRun(target="checker").command == []
    assert ExecRun(command=["env", "A=1", "x"]).command == ["env", "A=1", "x"]
    assert ExecRun(command=["./A=b"]).command == ["./A=b"]  # a path, not an assignment


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "command is empty"),
        ({"command": []}, "command is empty"),
        ({"command": ["  "]}, "command is empty"),
        ({"command": ["A=1", "python"]}, "A=… sets an environment variable"),
        ({"command": ["a\0b"]}, "NUL byte"),
        ({"command": ["x"] * 1025}, "at most 1024"),
        ({"command": ["x" * 40_000, "y" * 40_000]}, "at most 65536 are taken"),
        ({"target": "task", "command": ["x"]}, "runs the job's own command; it takes no command"),
        ({"target": "checker", "command": ["x"]}, "runs the node check; it takes no command"),
        ({"target": "shell"}, "target"),
        ({"command": ["x"], "extra": 1}, "extra"),
    ],
)
def test_bad_runs_are_refused(body: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        ExecRun.model_validate(body)


def test_kills_and_holds_are_bounded() -> None:
    assert ExecKill(ranks=[3, 1, 3]).ranks == [3, 1]
    for ranks in ([], [-1], [1 << 20], list(range(1025))):
        with pytest.raises(ValidationError):
            ExecKill(ranks=ranks)
    assert ExecStop(hold="30m").hold == 1800
    assert ExecStop().hold is None
    for hold in ("25h", 0, "0s", -5):
        with pytest.raises(ValidationError):
            ExecStop(hold=hold)


def test_keep_failed_is_at_most_a_day_and_works_without_restarts() -> None:
    assert FaultTolerance(keep_failed="1h").keep_failed == 3600
    assert FaultTolerance(enabled=False, keep_failed=60).restarts == 0
    with pytest.raises(ValidationError):
        FaultTolerance(keep_failed="2d")
    with pytest.raises(ValidationError, match="only apply with fault tolerance on"):
        FaultTolerance(enabled=False, keep_failed=60, max_restarts=2)
