"""``squeue``: the pool's queued and running jobs, printed as Slurm 22.05 does."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

from gpuyard.client import Client
from gpuyard.models import JobView
from gpuyard.models.slurm import SlurmState
from gpuyard.slurm import openapi, render
from gpuyard.slurm.commands.base import (
    Args,
    BadJobId,
    open_client,
    parse_ids,
)
from gpuyard.slurm.commands.jobs import (
    all_jobs,
    asked_states,
    collapse_pending_arrays,
    jobs_for,
    matching,
    pool_statuses,
    records_of,
)
from gpuyard.slurm.records import JobRecord

__all__ = ["squeue"]


_SQUEUE_VALUED = {
    "-j": "jobs",
    "--jobs": "jobs",
    "-u": "user",
    "--user": "user",
    "-t": "states",
    "--states": "states",
    "-p": "partition",
    "--partition": "partition",
    "-n": "name",
    "--name": "name",
    "-o": "format",
    "--format": "format",
    "-S": "sort",
    "--sort": "sort",
    "-M": "clusters",
    "--clusters": "clusters",
    "-A": "account",
    "--account": "account",
    "-q": "qos",
    "--qos": "qos",
    "-w": "nodelist",
    "--nodelist": "nodelist",
}


_SQUEUE_FLAGS = {
    "-h": "noheader",
    "--noheader": "noheader",
    "-a": "all",
    "--all": "all",
    "-r": "array",
    "--array": "array",
    "--me": "me",
    "-l": "long",
    "--long": "long",
    "-v": "verbose",
    "--verbose": "verbose",
    "--json": "json",
}


def squeue(args: Sequence[str], out: TextIO) -> int:
    parsed = Args(args, _SQUEUE_VALUED, _SQUEUE_FLAGS)
    if parsed.has("json"):
        return _squeue_json(parsed, out)
    fmt = parsed.last("format")
    _, problems = render.squeue_format(fmt)
    states = asked_states(parsed.all("states"))
    ids = parsed.all("jobs")
    with open_client() as client:
        if ids:
            jobs = _listed(client, ids)
            if not jobs:
                print(render.SQUEUE_INVALID_JOB, file=sys.stderr)
                return 1
        else:
            owner = parsed.last("user") or (client.user if parsed.has("me") else None)
            # Only what Slurm keeps in memory: active jobs, and those ended within MinJobAge
            # (300 s) when states are asked for; the pool selects them, not this client.
            statuses = pool_statuses(states) if states else ["queued", "running"]
            jobs = all_jobs(
                client,
                owner=owner,
                status=statuses,
                active_after=time.time() - 300 if states else None,
            )
    now = time.time()
    records = _squeue_select(records_of(jobs), parsed, states, listed=bool(ids), now=now)
    for problem in problems:
        print(problem, file=sys.stderr)  # Slurm still prints the table and exits 0
    out.write(
        render.render_squeue(
            render.squeue_sort(records), fmt=fmt, header=not parsed.has("noheader"), now=now
        )
    )
    return 0


def _squeue_json(parsed: Args, out: TextIO) -> int:
    """``squeue --json``: every job the controller still holds (active, or ended within
    MinJobAge, 300 s), in job id order. Slurm 22.05 ignores ``-j`` here and prints them all;
    we honour ``-j`` (as Slurm 23.02 does), because torchx's status call, ``squeue --json -j
    ID``, reads every job listed as one of the app's replicas."""
    ids = parsed.all("jobs")
    with open_client() as client:
        if ids:
            jobs = _listed(client, ids)
        else:
            owner = parsed.last("user") or (client.user if parsed.has("me") else None)
            jobs = all_jobs(client, owner=owner, status=[], active_after=time.time() - 300)
    now = time.time()
    records = [
        r
        for r in sorted(records_of(jobs), key=lambda r: r.job_id)
        if r.end is None or now - r.end < 300
    ]
    out.write(openapi.dumps(openapi.squeue_document(collapse_pending_arrays(records))))
    return 0


def _listed(client: Client, ids: list[str]) -> list[JobView]:
    """The jobs ``-j`` names; none when one of its ids is not a job id (squeue then says the
    job id is invalid, as for a job that does not exist)."""
    try:
        return jobs_for(client, parse_ids(ids))
    except BadJobId:
        return []


def _squeue_select(
    records: list[JobRecord], parsed: Args, states: set[str], *, listed: bool, now: float
) -> list[JobRecord]:
    """The rows squeue shows: by state (pending and running unless told; a job asked for by
    id stays visible for MinJobAge, 300 s, after it ends, as in Slurm), partition and name."""
    if not states and not listed:
        records = [
            r
            for r in records
            if r.state
            in (SlurmState.PENDING, SlurmState.RUNNING, SlurmState.SUSPENDED, SlurmState.COMPLETING)
        ]
    elif not states:
        records = [r for r in records if r.end is None or now - r.end < 300]
    records = matching(
        records, states=states, partitions=parsed.all("partition"), names=parsed.all("name")
    )
    return records if parsed.has("array") else collapse_pending_arrays(records)
