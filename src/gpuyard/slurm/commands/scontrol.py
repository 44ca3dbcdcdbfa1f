"""``scontrol`` outside a job: show job, hostnames, hostlist, config; requeue, requeuehold,
hold, release, ping (a job's own ``scontrol`` is :mod:`gpuyard.slurm.step`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from gpuyard.errors import GpuyardError as ClientError
from gpuyard.slurm import render
from gpuyard.slurm.commands.base import (
    BadJobId,
    CommandError,
    het_components,
    open_client,
    parse_ids,
)
from gpuyard.slurm.commands.jobs import (
    job_records,
    jobs_for,
    only_components,
)

__all__ = ["scontrol"]


def _scontrol_hold(words: Sequence[str]) -> int:
    """``scontrol hold|uhold|release ID…``."""
    if len(words) < 2:
        raise CommandError("Invalid job id specified")
    try:
        ids = parse_ids(words[1:])
    except BadJobId as exc:
        raise CommandError(f"Invalid job id specified: {exc.text}") from None
    with open_client() as client:
        jobs = [job.id for job in jobs_for(client, ids)]
        failed = []
        for start in range(0, len(jobs), 1000):  # one request for a whole queue
            result = client.hold_many(jobs[start : start + 1000], held=words[0] != "release")
            failed += result.failed
    if failed:
        raise CommandError(f"Job {failed[0].id}: {failed[0].detail}")
    return 0


def _show_hostlist(words: Sequence[str], out: TextIO) -> int:
    """``show hostnames|hostname|hostlist [LIST]`` (the job's own list when none is given)."""
    text = words[2] if len(words) > 2 else os.environ.get("SLURM_JOB_NODELIST", "")
    if not text:
        raise CommandError("No hostlist specified")
    try:
        shown = (
            render.render_show_hostlist(text)
            if words[1] == "hostlist"
            else render.render_show_hostnames(text)
        )
    except ValueError:
        # Slurm 22.05 says so on stderr and still exits 0.
        print(render.INVALID_HOSTLIST.format(text=text), file=sys.stderr)
        return 0
    out.write(shown)
    return 0


def _show_job(words: Sequence[str], oneliner: bool, out: TextIO) -> int:
    """``show job [ID]``: every job, or the one named."""
    with open_client() as client:
        if len(words) > 2:
            try:
                jobs = jobs_for(client, parse_ids(words[2:3]))
            except BadJobId:
                jobs = []
            if not jobs:
                print(render.SCONTROL_SHOW_JOB_INVALID, file=sys.stderr)
                return 1
        else:
            jobs = client.jobs(limit=1000).items
        now = time.time()
        records = only_components(
            [r for j in jobs for r in job_records(j)], het_components(words[2:3])
        )
        texts = [render.render_scontrol_show_job(r, now=now) for r in records]
    if oneliner:
        texts = [" ".join(t.split()) + " \n" for t in texts]  # as Slurm: a space ends it
    out.write("".join(texts))  # each block ends with its blank line
    return 0


def _requeue(words: Sequence[str]) -> int:
    """``requeue|requeuehold ID...``: each job back to the queue (gpuyard suspends it);
    ``requeuehold`` keeps it held there until ``scontrol release``."""
    if len(words) < 2:
        raise CommandError("Invalid job id specified")
    try:
        ids = parse_ids(words[1:])
    except BadJobId as exc:
        raise CommandError(
            render.SCONTROL_REQUEUE_INVALID.format(text=exc.text), raw=True
        ) from None
    if components := het_components(words[1:]):
        # Slurm requeues a heterogeneous job whole, by its first id only.
        job_id, offsets = min(components.items())
        raise CommandError(
            render.SCONTROL_REQUEUE_INVALID.format(text=f"{job_id}+{min(offsets)}"), raw=True
        )
    with open_client() as client:
        for job in jobs_for(client, ids):
            try:
                client.suspend(job.id, hold=words[0] == "requeuehold")
            except ClientError as exc:
                raise CommandError(f"Requeue of job {job.id} failed: {exc.detail}") from None
    return 0


def scontrol(args: Sequence[str], out: TextIO) -> int:
    words = [a for a in args if a not in ("-o", "--oneliner", "-d", "--details", "-Q")]
    oneliner = "-o" in args or "--oneliner" in args
    if words[:2] in (["show", "hostnames"], ["show", "hostname"], ["show", "hostlist"]):
        return _show_hostlist(words, out)
    if words[:2] == ["show", "job"] or (
        words[:1] == ["show"] and len(words) > 1 and words[1].startswith("job")
    ):
        return _show_job(words, oneliner, out)
    if words[:1] in (["requeue"], ["requeuehold"]):
        return _requeue(words)
    if words[:1] in (["hold"], ["uhold"], ["release"]):
        return _scontrol_hold(words)
    if words[:2] == ["show", "config"]:
        out.write(
            f"Configuration data as of {time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
            "ClusterName             = gpuyard\nMinJobAge               = 300 sec\n"
            f"SLURM_VERSION           = 22.05.8\n"
        )
        return 0
    if words[:1] in (["ping"],):
        with open_client() as client:
            client.health()
        out.write("Slurmctld(primary) at gpuyard is UP\n")
        return 0
    raise CommandError(
        f"`scontrol {' '.join(args)}` is not supported; gpuyard answers show job, show "
        "hostnames, show hostlist, show config, requeue, requeuehold, hold, release and ping "
        "(docs/slurm.md)"
    )
