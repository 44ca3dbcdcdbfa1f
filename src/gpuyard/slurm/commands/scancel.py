"""``scancel``: cancel or signal jobs."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from gpuyard.errors import GpuyardError as ClientError
from gpuyard.models.slurm import SlurmState
from gpuyard.slurm import render
from gpuyard.slurm.commands.base import (
    BadJobId,
    CommandError,
    het_components,
    open_client,
    parse_ids,
)
from gpuyard.slurm.commands.jobs import (
    job_record,
    jobs_for,
)
from gpuyard.spec_limits import signal_number
from gpuyard.terminal import printable

__all__ = ["scancel"]


def scancel(args: Sequence[str], out: TextIO) -> int:  # noqa: PLR0912, PLR0915 - one pass over Slurm's options, read top to bottom

    signal = None
    batch = False
    ids: list[str] = []
    user = None
    states: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-s", "--signal"):
            i += 1
            if i >= len(args):
                raise CommandError("option '--signal' requires an argument")
            signal = args[i]
        elif arg.startswith("--signal="):
            signal = arg.split("=", 1)[1]
        elif arg.startswith("-s") and len(arg) > 2:
            signal = arg[2:]
        elif arg in ("-b", "--batch"):
            batch = True
        elif arg in ("-f", "--full"):
            batch = False
        elif arg in ("-u", "--user"):
            i += 1
            user = args[i] if i < len(args) else None
        elif arg.startswith("--user="):
            user = arg.split("=", 1)[1]
        elif arg in ("-t", "--state"):
            i += 1
            states.add(args[i].upper() if i < len(args) else "")
        elif arg.startswith("--state="):
            states.add(arg.split("=", 1)[1].upper())
        elif arg in ("-Q", "--quiet", "-v", "--verbose", "-i", "--interactive"):
            pass
        elif arg.startswith("-"):
            raise CommandError(f"unrecognized option '{arg}'")
        else:
            ids.append(arg)
        i += 1
    try:
        parsed = parse_ids(ids)
    except BadJobId as exc:
        raise CommandError(render.SCANCEL_BAD_ID.format(text=exc.text), raw=True) from None
    if components := het_components(ids):
        job_id, offsets = min(components.items())
        raise CommandError(
            f"Kill job error on job id {job_id}+{min(offsets)}: the components of a "
            f"heterogeneous job stop together here; scancel {job_id} stops them all"
        )
    with open_client() as client:
        if ids:
            # An id that names no job is not an error for Slurm's scancel (it prints nothing).
            jobs = jobs_for(client, parsed)
        elif user:
            jobs = client.jobs(owner=user, status=["queued", "running"], limit=1000).items
        else:
            raise CommandError("No job identification provided")
        if states:
            want = {"PD": SlurmState.PENDING, "R": SlurmState.RUNNING}
            named = {want.get(s, s) for s in states}
            jobs = [j for j in jobs if job_record(j).state in named]
        status = 0
        for job in jobs:
            if job.state.is_terminal():
                continue
            try:
                if signal is not None:
                    client.signal(job.id, _signum(signal), steps=not batch)
                else:
                    client.stop(job.id)
            except ClientError as exc:
                print(
                    printable(f"scancel: error: Kill job error on job id {job.id}: {exc.detail}"),
                    file=sys.stderr,
                )
                status = 1
    return status


def _signum(text: str) -> int:
    try:
        return signal_number(text)
    except ValueError:
        raise CommandError(f"Unknown job signal: {text}") from None
