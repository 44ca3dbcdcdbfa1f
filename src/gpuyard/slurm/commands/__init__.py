"""The Slurm-compatible commands a user runs: ``sbatch salloc squeue sacct scancel sinfo scontrol``.

``gpuyard slurm-shims DIR`` writes one small script per command into DIR; each runs
``python -m gpuyard.slurm COMMAND ...``, which lands in :func:`main`. They talk to the pool over
its API with the user's credentials, like the ``gpuyard`` CLI, and print what Slurm 22.05 prints
(``gpuyard.slurm.render``). ``srun`` and the in-job ``scontrol`` are the job's own
(``slurm/step/main.py``): they need no server.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO, cast

from gpuyard.errors import GpuyardError as ClientError
from gpuyard.slurm.commands import (
    sacct,
    salloc,
    sbatch,
    scancel,
    scontrol,
    sinfo,
    squeue,
    srun,
)
from gpuyard.slurm.commands.base import SLURM_VERSION, CommandError
from gpuyard.slurm.options import OptionError
from gpuyard.terminal import PrintableWriter, printable

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, Callable[[Sequence[str], TextIO], int]] = {
    "sacct": sacct.sacct,
    "salloc": salloc.salloc,
    "sbatch": sbatch.sbatch,
    "scancel": scancel.scancel,
    "scontrol": scontrol.scontrol,
    "sinfo": sinfo.sinfo,
    "squeue": squeue.squeue,
    "srun": srun.srun,
}
"""One module per command, each ``(args, out) -> exit status``."""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print(
            f"usage: python -m gpuyard.slurm {{{'|'.join(sorted(COMMANDS))}}} ...", file=sys.stderr
        )
        return 1
    name, rest = args[0], args[1:]
    if rest in (["--version"], ["-V"]):
        print(SLURM_VERSION)
        return 0
    # Job names, commands, env and reasons are their owners' text: whatever a command
    # prints reaches the terminal without escape sequences (gpuyard.terminal).
    out = cast(TextIO, PrintableWriter(sys.stdout))
    try:
        return COMMANDS[name](rest, out)
    except CommandError as exc:
        print(printable(str(exc) if exc.raw else f"{name}: error: {exc}"), file=sys.stderr)
        return exc.status
    except OptionError as exc:
        print(printable(f"{name}: error: {exc}"), file=sys.stderr)
        return 1
    except ClientError as exc:
        print(printable(f"{name}: error: {exc.detail}"), file=sys.stderr)
        return 1
