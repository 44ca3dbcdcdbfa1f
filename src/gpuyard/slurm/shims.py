"""``gpuyard slurm-shims DIR``: one script per Slurm command, for users to put on PATH."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

__all__ = ["SHIMS", "write_shims"]

SHIMS = ("sbatch", "srun", "salloc", "squeue", "sacct", "scancel", "sinfo", "scontrol")


def write_shims(directory: Path, python: str = sys.executable) -> list[Path]:
    """Write the commands into ``directory`` (made if missing); their paths.

    ``srun`` outside a job says so: it starts steps inside an allocation only (docs/slurm.md);
    inside a job the job's own ``srun`` comes first on PATH.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SHIMS:
        path = directory / name
        body = f'#!/bin/sh\nexec {shlex.quote(python)} -m gpuyard.slurm {name} "$@"\n'
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(body, encoding="utf-8")
        os.chmod(tmp, 0o755)  # noqa: S103 - commands for everyone to run
        tmp.replace(path)
        written.append(path)
    return written
