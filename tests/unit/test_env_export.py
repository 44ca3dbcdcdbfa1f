"""The ``--export`` rule every submission path shares (sbatch, ``gpuyard submit``, the client)."""

from __future__ import annotations

import pytest

from gpuyard.env_export import ExportError, exported_environment

SHELL = {
    "PATH": "/venv/bin:/usr/bin",
    "VIRTUAL_ENV": "/venv",
    "MY_FLAG": "on",
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "CUDA_VISIBLE_DEVICES": "3",
    "GPUYARD_TOKEN": "secret",
    "SLURM_JOB_ID": "9",
    "BAD-NAME": "x",
}


def test_all_is_the_default_and_drops_what_the_pool_sets() -> None:
    kept = {"PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv", "MY_FLAG": "on"}
    assert exported_environment(SHELL, None) == kept
    assert exported_environment(SHELL, "ALL") == kept
    assert exported_environment(SHELL, "all") == kept


@pytest.mark.parametrize(
    ("export", "env"),
    [
        ("NONE", {}),
        ("NONE,A=1", {"A": "1"}),
        ("A=1", {"A": "1"}),
        ("MY_FLAG,B=2", {"MY_FLAG": "on", "B": "2"}),
        ("MY_FLAG,MISSING", {"MY_FLAG": "on"}),
        (
            "ALL,A=1",
            {"PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv", "MY_FLAG": "on", "A": "1"},
        ),
        (
            "ALL,MY_FLAG=off",
            {"PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv", "MY_FLAG": "off"},
        ),
        ("NONE, A=x=y ,", {"A": "x=y"}),
    ],
)
def test_export_lists_read_as_slurms(export: str, env: dict[str, str]) -> None:
    assert exported_environment(SHELL, export) == env


@pytest.mark.parametrize("export", ["NONE,BAD-NAME=1", "1ST", "A B=1"])
def test_a_bad_name_is_refused(export: str) -> None:
    with pytest.raises(ExportError, match=r"is not a variable name"):
        exported_environment(SHELL, export)


@pytest.mark.parametrize(
    "export",
    [
        "GPUYARD_TOKEN",
        "NONE,GPUYARD_URL=http://x",
        "ALL,SLURM_JOB_ID=1",
        "HOME=/x",
        "USER",
        "CUDA_VISIBLE_DEVICES=0",
    ],
)
def test_what_the_pool_sets_or_a_token_is_refused(export: str) -> None:
    with pytest.raises(ExportError, match=r"cannot be given to a job"):
        exported_environment(SHELL, export)
