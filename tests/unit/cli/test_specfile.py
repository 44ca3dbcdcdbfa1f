"""Job files and flags merge into one API spec; bad input says what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.cli.specfile import (
    build_spec,
    command_text,
    load_job_file,
    parse_alternative,
    parse_env_flags,
    parse_nodes,
)
from gpuyard.errors import InvalidSpec
from gpuyard.models import JobSpec


def test_flat_and_nested_fields_and_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: resnet\ncommand: [python, train.py, --data, /d s]\ngpus: 2\n"
        "resources: {memory: 16G}\nmax-runtime: 2h\nenv: {A: 1}\n"
    )
    spec = build_spec(load_job_file(path), {"gpus": 4, "env": {"B": "2"}, "name": None})
    assert spec == {
        "name": "resnet",
        "command": "python train.py --data '/d s'",
        "max_runtime": "2h",
        "resources": {"memory": "16G", "gpus": 4},
        "env": {"A": "1", "B": "2"},
    }
    parsed = JobSpec.model_validate(spec)
    assert parsed.resources.memory == 16 << 30
    assert parsed.max_runtime == 7200


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- a\n- b\n", "must be a mapping"),
        ("command: x\ngpu: 1\n", "unknown fields: gpu"),
        ("command: [x\n", "not valid YAML"),
    ],
)
def test_bad_job_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(content)
    with pytest.raises(InvalidSpec, match=message):
        load_job_file(path)


def test_missing_file_and_missing_command(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match="does not exist"):
        load_job_file(tmp_path / "nope.yaml")
    with pytest.raises(InvalidSpec, match="no command given"):
        build_spec({}, {"gpus": 1})


def test_command_words_and_env_flags() -> None:
    assert command_text(["python train.py && x"]) == "python train.py && x"
    assert command_text(["bash", "-c", "a && b"]) == "bash -c 'a && b'"
    assert parse_env_flags(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(InvalidSpec, match="KEY=VALUE"):
        parse_env_flags(["NOPE"])


def test_scheduling_fields_from_file_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("command: python train.py\nnodes: 2..4\ndriver: '535.104'\npriority: high\n")
    spec = build_spec(load_job_file(path), {})
    assert spec == {
        "command": "python train.py",
        "nodes": 4,
        "min_nodes": 2,
        "driver_version": "535.104",
        "priority": "high",
    }
    parsed = JobSpec.model_validate(spec)
    assert (parsed.elastic, parsed.min_nodes, parsed.nodes) == (True, 2, 4)
    other = tmp_path / "alternatives.yaml"
    other.write_text("command: x\ngpus: 8\nalternatives: [{gpus: 4, memory: 32G}]\n")
    alternatives = JobSpec.model_validate(build_spec(load_job_file(other), {})).alternatives
    assert [(a.gpus, a.memory) for a in alternatives] == [(4, 32 << 30)]
    # Flags win: a plain node count keeps the file's minimum; a range replaces it.
    assert build_spec(load_job_file(path), {"nodes": "3"})["nodes"] == 3
    assert build_spec(load_job_file(path), {"nodes": "1..2"})["min_nodes"] == 1
    flags = {
        "node_names": ["n0", "n1"],
        "alternatives": [parse_alternative("gpus=2,cpus=8")],
        "pool": "a100",
    }
    merged = build_spec({"command": "x"}, flags)
    assert merged == {
        "command": "x",
        "node_names": ["n0", "n1"],
        "alternatives": [{"gpus": "2", "cpus": "8"}],
        "pool": "a100",
    }
    assert JobSpec.model_validate({**merged, "pool": None}).alternatives[0].gpus == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [("two", r"takes a number \(4\) or an elastic range MIN\.\.MAX"), ("4..2", "4 is more than 2")],
)
def test_bad_node_counts(text: str, message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        parse_nodes(text)


@pytest.mark.parametrize("text", ["gpus", "gpu=4", "gpus=4,,cpus=2", "gpus="])
def test_bad_alternatives(text: str) -> None:
    with pytest.raises(InvalidSpec, match="--alternative takes gpus=N,cpus=N,memory=SIZE"):
        parse_alternative(text)


def test_driver_and_driver_version_together(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("command: x\ndriver: '1'\ndriver_version: '2'\n")
    with pytest.raises(InvalidSpec, match="gives both driver and driver_version; keep one"):
        load_job_file(path)


def test_yaml_env_values_are_kept_exactly_as_written(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "command: python train.py\n"
        "env:\n  DEBUG: yes\n  VERSION: 1.10\n  OFF: off\n  N: 007\n  EMPTY: ''\n"
    )
    env = load_job_file(path)["env"]
    assert env == {"DEBUG": "yes", "VERSION": "1.10", "OFF": "off", "N": "007", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("command: a\ncommand: b\n", "command"),  # a key given twice: which wins is a guess
        ("env:\n  A: x\n  A: y\ncommand: a\n", "A"),
        ("a: &x [1, 2]\nb: *x\ncommand: a\n", "alias"),
        # The billion laughs: a few lines that would expand to gigabytes.
        (
            "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\ncommand: a\n",
            "alias",
        ),
        ("command: a\nenv:\n  A: [1, 2]\n", "env.A must be text"),
        ("- just\n- a list\n", "must be a mapping"),
        ("command: [unclosed\n", "not valid YAML"),
    ],
)
def test_yaml_job_files_are_read_strictly(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(InvalidSpec, match=None) as refused:
        load_job_file(path)
    assert says in str(refused.value)


def test_a_huge_yaml_job_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"command: a\n" + b"# padding\n" * 200_000)
    with pytest.raises(InvalidSpec, match="the limit is 1048576"):
        load_job_file(path)


def test_export_from_a_job_file_or_the_flag() -> None:
    from gpuyard.cli.specfile import exported_env

    shell = {"A": "1", "B": "2", "PATH": "/venv/bin"}
    assert exported_env({}, None, shell) == shell  # ALL by default
    assert exported_env({"image": "official/x:1"}, None, shell) == {}  # NONE in an image
    assert exported_env({"image": "official/x:1"}, "A", shell) == {"A": "1"}
    fields = {"export": ["A", "C=3"]}
    assert exported_env(fields, None, shell) == {"A": "1", "C": "3"}
    assert "export" not in fields  # the API has no such field
    assert exported_env({"export": "NONE"}, "B", shell) == {"B": "2"}  # the flag wins
    with pytest.raises(InvalidSpec, match="export takes ALL, NONE or a list"):
        exported_env({"export": 3}, None, shell)
    with pytest.raises(InvalidSpec, match="'1A' is not a variable name"):
        exported_env({}, "1A=x", shell)
