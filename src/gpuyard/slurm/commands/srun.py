"""``srun`` outside a job: refused with what to do instead (the job's own ``srun`` is
:mod:`gpuyard.slurm.step`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from gpuyard.slurm.commands.base import (
    CommandError,
)

__all__ = ["srun"]


def srun(args: Sequence[str], out: TextIO) -> int:
    raise CommandError(
        "srun starts job steps inside an allocation only: put it in a script and submit that "
        "with sbatch, or run it under salloc (docs/slurm.md)"
    )
