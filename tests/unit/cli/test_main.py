"""Every ``--help`` lists every value its enumerated options accept: a walk over the whole CLI.

An option is enumerated when its type is an enum (typer turns it into a choice) or when its
name is one the wire models enumerate (:data:`ENUMERATED`: ``--mode`` takes a
:class:`JobMode`, a ``tier`` argument a :class:`Priority`, …), whichever command has it; the
CLI passes those as plain strings and the server validates them, so the help text is the
only place a user learns the values. A new command with such an option is checked without
touching this test."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from enum import Enum
from typing import Any

import pytest
import typer

from gpuyard.cli.main import app
from gpuyard.models.access import Access
from gpuyard.models.accounts import PoolPreemption, Role
from gpuyard.models.dataset import DatasetVisibility
from gpuyard.models.execs import ExecTarget
from gpuyard.models.faults import Recovery
from gpuyard.models.image_catalogue import ImageScope, ImageVisibility
from gpuyard.models.job import After, JobMode, MpiImplementation, Priority, TorchLauncher
from gpuyard.models.states import JobStatus
from gpuyard.settings import Settings
from gpuyard.simulator import PRESETS
from gpuyard.simulator.cluster import CLUSTER_PRESETS
from gpuyard.simulator.runner import POLICIES


def _values(enum: type[Enum]) -> tuple[str, ...]:
    return tuple(str(member.value) for member in enum)


ENUMERATED: dict[str, tuple[str, ...]] = {
    "mode": _values(JobMode),
    "priority": _values(Priority),
    "tier": _values(Priority),
    "access": _values(Access),
    "recovery": _values(Recovery),
    "mpi": _values(MpiImplementation),
    "launcher": _values(TorchLauncher),
    "after": _values(After),
    "status": _values(JobStatus),
    "role": _values(Role),
    "preemption": _values(PoolPreemption),
    "scope": _values(ImageScope),
    "visibility": _values(ImageVisibility),
    "target": _values(ExecTarget),
    "executor": typing.get_args(Settings.model_fields["executor"].annotation),
    "preset": tuple(PRESETS),
    "cluster_preset": tuple(CLUSTER_PRESETS),
    "policy": tuple(POLICIES),
}
"""Parameter name → the values it accepts, from the models that validate them."""

# Parameters named like an enumerated one that take another model's values.
BY_COMMAND: dict[tuple[str, str], tuple[str, ...]] = {
    (f"datasets {command}", "visibility"): _values(DatasetVisibility)
    for command in ("create", "upload", "share")
}

# Parameters named like an enumerated one that take something else.
NOT_ENUMERATED = {
    ("audit", "target"),  # an audit entry's target, e.g. job:12
    ("audit", "after"),  # an audit entry's id
}


def _commands(group: Any, path: tuple[str, ...], ctx: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command.hidden:
            continue
        if hasattr(command, "list_commands"):
            yield from _commands(command, (*path, name), type(ctx)(command, parent=ctx))
        else:
            yield (*path, name), command


def _accepted(param: Any) -> tuple[str, ...] | None:
    annotation = param.type_descriptor.annotation
    inner = typing.get_args(annotation) or (annotation,)
    enums = [t for t in inner if isinstance(t, type) and issubclass(t, Enum)]
    if enums:
        return _values(enums[0])
    return ENUMERATED.get(param.name)


def _enumerated_params() -> Iterator[Any]:
    root = typer.main.get_command(app)
    for path, command in _commands(root, (), typer.Context(root)):
        for param in command.params:
            accepted = BY_COMMAND.get((" ".join(path), param.name)) or _accepted(param)
            if accepted and (" ".join(path), param.name) not in NOT_ENUMERATED:
                yield pytest.param(command, param, accepted, id=f"{' '.join(path)} {param.name}")


def test_the_walk_finds_the_enumerated_options() -> None:
    found = {p.id for p in _enumerated_params()}
    assert {"submit mode", "submit priority", "ls status", "users set role"} <= found


@pytest.mark.parametrize(("command", "param", "accepted"), list(_enumerated_params()))
def test_help_lists_every_accepted_value(
    command: Any, param: Any, accepted: tuple[str, ...]
) -> None:
    ctx = typer.Context(command)
    record = param.get_help_record(ctx)
    shown = " ".join(record) if record else (param.help or "")
    missing = [v for v in accepted if not re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", shown)]
    assert missing == [], f"{param.opts} help {shown!r} does not list {missing}"


def test_version() -> None:
    from typer.testing import CliRunner

    from gpuyard import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"gpuyard {__version__}\n")
