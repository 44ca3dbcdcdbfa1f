"""``gpuyard slurm-shims DIR``: one script per Slurm command, for users to put on PATH.

Each runs ``python -I -S`` with the package's directory and the environment's site-packages
put on ``sys.path`` when the shims are written: skipping ``site`` (and its ``.pth`` files)
saves more than ``sbatch``'s quick path spends on its own imports, and ``-I`` keeps the
caller's ``PYTHON*`` variables and working directory out of the command's imports. The full
commands run ``site`` themselves (``gpuyard.slurm.__main__``).
"""

from __future__ import annotations

import os
import shlex
import sys
import sysconfig
from pathlib import Path

import gpuyard

__all__ = ["SHIMS", "search_path", "write_shims"]

SHIMS = ("sbatch", "srun", "salloc", "squeue", "sacct", "scancel", "sinfo", "scontrol")


def search_path() -> list[str]:
    """Where the commands import from: gpuyard's own directory, then this environment's
    site-packages (after the standard library, which ``-S`` keeps)."""
    found = [str(Path(gpuyard.__file__).resolve().parent.parent)]
    paths = sysconfig.get_paths()
    found += [paths["purelib"], paths["platlib"]]
    return list(dict.fromkeys(p for p in found if p))


def write_shims(directory: Path, python: str = sys.executable) -> list[Path]:
    """Write the commands into ``directory`` (made if missing); their paths.

    ``srun`` outside a job says so: it starts steps inside an allocation only (docs/slurm.md);
    inside a job the job's own ``srun`` comes first on PATH. For another interpreter than
    this one (``python``) the shims run ``python -m gpuyard.slurm`` as it finds it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if python == sys.executable:
        code = (
            f"import sys; sys.path += {search_path()!r}; "
            "from gpuyard.slurm.__main__ import run; sys.exit(run(sys.argv[1:]))"
        )
        start = f"{shlex.quote(python)} -I -S -c {shlex.quote(code)}"
    else:
        start = f"{shlex.quote(python)} -m gpuyard.slurm"
    written = []
    for name in SHIMS:
        path = directory / name
        body = f'#!/bin/sh\nexec {start} {name} "$@"\n'
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(body, encoding="utf-8")
        os.chmod(tmp, 0o755)  # noqa: S103 - commands for everyone to run
        tmp.replace(path)
        written.append(path)
    return written
