"""Job files and flags merge into one API spec; bad input says what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.cli.specfile import build_spec, command_text, load_job_file, parse_env_flags
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
