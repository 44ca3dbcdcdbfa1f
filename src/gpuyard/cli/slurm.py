"""``gpuyard slurm-shims DIR``: Slurm's commands for users' unchanged scripts (docs/slurm.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command("slurm-shims")(slurm_shims)


def slurm_shims(
    directory: Annotated[Path, typer.Argument(help="Where to write the commands.")],
) -> None:
    """Write sbatch, srun, salloc, squeue, sacct, scancel, sinfo and scontrol into DIRECTORY; put it
    first on PATH and Slurm clients (submitit, Lightning, lab scripts) run on this pool."""
    from gpuyard.slurm.shims import write_shims

    written = write_shims(directory)
    typer.echo(f"wrote {', '.join(p.name for p in written)} to {directory}")
    typer.echo(f'use them with: export PATH="{directory.resolve()}:$PATH"')
