"""``sacct``: the pool's jobs, finished ones too, printed as Slurm 22.05 does."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from typing import Literal, TextIO

from gpuyard.slurm import openapi, render
from gpuyard.slurm.commands.base import (
    Args,
    BadJobId,
    CommandError,
    het_components,
    open_client,
    parse_ids,
)
from gpuyard.slurm.commands.jobs import (
    all_jobs,
    asked_states,
    collapse_pending_arrays,
    jobs_for,
    matching,
    only_components,
    pool_statuses,
    records_of,
    srun_steps,
)
from gpuyard.slurm.options import slurm_time

__all__ = ["sacct"]


_SACCT_VALUED = {
    "-j": "jobs",
    "--jobs": "jobs",
    "-o": "format",
    "--format": "format",
    "--name": "name",
    "-S": "start",
    "--starttime": "start",
    "-E": "end",
    "--endtime": "end",
    "-u": "user",
    "--user": "user",
    "-s": "state",
    "--state": "state",
    "-M": "clusters",
    "--clusters": "clusters",
    "-A": "account",
    "--accounts": "account",
    "-r": "partition",
    "--partition": "partition",
}


_SACCT_FLAGS = {
    "--json": "json",
    "--yaml": "json",
    "-P": "parsable2",
    "--parsable2": "parsable2",
    "-p": "parsable",
    "--parsable": "parsable",
    "-n": "noheader",
    "--noheader": "noheader",
    "-X": "allocations",
    "--allocations": "allocations",
    "-D": "duplicates",
    "--duplicates": "duplicates",
    "-a": "allusers",
    "--allusers": "allusers",
    "-b": "brief",
    "--brief": "brief",
    "-L": "allclusters",
    "--allclusters": "allclusters",
    "--noconvert": "noconvert",
    "-l": "long",
    "--long": "long",
}


def sacct(args: Sequence[str], out: TextIO) -> int:
    parsed = Args(args, _SACCT_VALUED, _SACCT_FLAGS)
    if parsed.has("json") and any(a.startswith("--yaml") for a in args):
        raise CommandError("--yaml is not supported; --json prints the same document")
    fmt = ",".join(parsed.all("format")) or None
    if parsed.has("brief"):
        fmt = "JobID,State,ExitCode"
    try:
        fields = render.sacct_fields(fmt)
    except render.SlurmFormatError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    mode: Literal["table", "parsable", "parsable2"] = (
        "parsable2"
        if parsed.has("parsable2")
        else "parsable"
        if parsed.has("parsable")
        else "table"
    )
    with open_client() as client:
        ids = parsed.all("jobs")
        if ids:
            try:
                jobs = jobs_for(client, parse_ids(ids))
            except BadJobId as exc:
                raise CommandError(render.SACCT_BAD_JOB.format(text=exc.text), raw=True) from None
        else:
            owner = None if parsed.has("allusers") else (parsed.last("user") or client.user)
            since, until = _sacct_window(parsed)
            statuses = pool_statuses((s.upper() for s in parsed.all("state")), accounting=True)
            # The pool selects by owner, state and time: a long history is not paged through.
            jobs = all_jobs(
                client, owner=owner, status=statuses, active_after=since, created_before=until
            )
            jobs.sort(key=lambda j: j.id)
        steps = None if parsed.has("allocations") else srun_steps(client, jobs)
    records = records_of(jobs, steps, accounting=True)
    records = only_components(records, het_components(parsed.all("jobs")))  # -j 516+1
    records = matching(records, states=asked_states(parsed.all("state")), names=parsed.all("name"))
    records = collapse_pending_arrays(records)
    if parsed.has("json"):
        if parsed.has("allocations"):  # -X: the jobs without their steps
            records = [dataclasses.replace(r, steps=()) for r in records]
        out.write(openapi.dumps(openapi.sacct_document(records, now=time.time())))
        return 0
    out.write(
        render.render_sacct(
            records,
            fields=fields,
            mode=mode,
            header=not parsed.has("noheader"),
            allocations=parsed.has("allocations"),
            duplicates=parsed.has("duplicates"),
            now=time.time(),
        )
    )
    return 0


def _sacct_window(parsed: Args) -> tuple[float, float]:
    """sacct's ``-S``/``-E``: from midnight today (or ``-S``) until now (or ``-E``)."""
    now = time.time()
    midnight = time.mktime((*time.localtime()[:3], 0, 0, 0, 0, 0, -1))

    def given(key: str, default: float) -> float:
        text = parsed.last(key)
        if text is None:
            return default
        found = slurm_time(text, now, past=True)
        if found is None:
            raise CommandError(f"Invalid time specification: {text}")
        return found

    return given("start", midnight), given("end", now)
