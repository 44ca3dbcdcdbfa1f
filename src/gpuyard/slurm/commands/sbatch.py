"""``sbatch``: submit a batch script (docs/slurm.md)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from gpuyard.errors import GpuyardError as ClientError
from gpuyard.slurm import render
from gpuyard.slurm.commands.base import (
    CommandError,
    open_client,
)
from gpuyard.slurm.options import OptionError
from gpuyard.spec_limits import MAX_SCRIPT

__all__ = ["sbatch"]


def sbatch(args: Sequence[str], out: TextIO) -> int:
    from gpuyard.slurm import sbatch as build

    def read_stdin() -> bytes | None:
        if sys.stdin is None or sys.stdin.isatty():
            return None
        return sys.stdin.buffer.read(MAX_SCRIPT + 1)

    try:
        options, script, name = build.parse(args, read_stdin)
        with open_client() as client:
            pools = [p.name for p in client.pools()]
            specs = build.specs_from_here(options, script, script_name=name, pools=pools)
            first = client.submit(specs[0])
            for spec in specs[1:]:
                spec["slurm"]["array"]["job_id"] = first.id
            submitted: list[int] = []
            try:
                for start in range(1, len(specs), 1000):
                    submitted += client.submit_many(specs[start : start + 1000])
            except ClientError:
                # All of the array or none of it: what was queued goes.
                queued = [first.id, *submitted]
                client.stop_many(queued)
                client.delete_many(queued)  # a task that already started is only stopped
                raise
    except OptionError as exc:
        # Slurm's sbatch ends option errors with 255.
        if str(exc).startswith("unrecognized option"):
            option = str(exc).split("'")[1]
            raise CommandError(
                render.SBATCH_UNRECOGNIZED.format(option=option), status=255, raw=True
            ) from None
        raise CommandError(str(exc), status=255) from None
    if "parsable" in options.values:
        out.write(f"{first.id}\n")
    else:
        out.write(f"Submitted batch job {first.id}\n")
    return 0
