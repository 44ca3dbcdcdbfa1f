"""``sacct``, ``squeue`` and ``sinfo``: the pool's jobs and nodes printed as Slurm 22.05 does."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TextIO

from gpuyard.client import Client
from gpuyard.models import JobView, NodeState
from gpuyard.models.request import DEFAULT_POOL
from gpuyard.models.slurm import SlurmStepView
from gpuyard.slurm import openapi, render
from gpuyard.slurm.commands import (
    BadJobId,
    CommandError,
    _client,
    _jobs_for,
    _parse_ids,
    het_components,
    job_records,
    only_components,
)
from gpuyard.slurm.options import slurm_time
from gpuyard.slurm.records import JobRecord, NodeRecord, PartitionRecord
from gpuyard.slurm.salloc import salloc

__all__ = ["COMMANDS"]


class _Args:
    """A small getopt: Slurm's commands mix short, long, ``--k=v`` and ``--k v``."""

    def __init__(self, args: Sequence[str], valued: dict[str, str], flags: dict[str, str]) -> None:
        self.values: dict[str, list[str]] = {}
        self.rest: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
            if not arg.startswith("--") and len(arg) > 2 and arg[:2] in valued:
                name, eq, value = arg[:2], "=", arg[2:]
            if name in flags:
                self.values.setdefault(flags[name], []).append("")
            elif name in valued:
                if not eq:
                    if i + 1 >= len(args):
                        raise CommandError(f"option '{name}' requires an argument")
                    value = args[i + 1]
                    i += 1
                self.values.setdefault(valued[name], []).append(value)
            elif arg.startswith("-"):
                raise CommandError(f"unrecognized option '{arg}'")
            else:
                self.rest.append(arg)
            i += 1

    def has(self, key: str) -> bool:
        return key in self.values

    def last(self, key: str) -> str | None:
        return self.values[key][-1] if key in self.values else None

    def all(self, key: str) -> list[str]:
        return [x for v in self.values.get(key, []) for x in v.split(",") if x]


def _records(
    jobs: Sequence[JobView], steps: dict[int, list[SlurmStepView]] | None = None
) -> list[JobRecord]:
    return [r for j in jobs for r in job_records(j, srun_steps=(steps or {}).get(j.id, ()))]


def _srun_steps(client: Client, jobs: Sequence[JobView]) -> dict[int, list[SlurmStepView]]:
    """The srun steps of the Slurm batch jobs that have started (sacct's ``.0``, ``.1`` rows)."""
    return {
        j.id: client.slurm_steps(j.id)
        for j in jobs
        if j.started_at is not None and j.spec is not None and j.spec.slurm is not None
    }


def _all_jobs(client: Client, *, status: list[str] | None, **filters: Any) -> list[JobView]:
    """Every job the filters match, a page of 1,000 at a time (``status`` None: states no
    gpuyard job is ever in were asked for, so none)."""
    out: list[JobView] = []
    if status is None:
        return out
    filters["status"] = status
    while True:
        page = client.jobs(offset=len(out), limit=1000, **filters)
        out += page.items
        if not page.items or len(out) >= page.total:
            return out


# --- sacct -------------------------------------------------------------------------------

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
    parsed = _Args(args, _SACCT_VALUED, _SACCT_FLAGS)
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
    with _client() as client:
        ids = parsed.all("jobs")
        if ids:
            try:
                jobs = _jobs_for(client, _parse_ids(ids))
            except BadJobId as exc:
                raise CommandError(render.SACCT_BAD_JOB.format(text=exc.text), raw=True) from None
        else:
            owner = None if parsed.has("allusers") else (parsed.last("user") or client.user)
            since, until = _sacct_window(parsed)
            statuses = _statuses(s.upper() for s in parsed.all("state"))
            # The pool selects by owner, state and time: a long history is not paged through.
            jobs = _all_jobs(
                client, owner=owner, status=statuses, active_after=since, created_before=until
            )
            jobs.sort(key=lambda j: j.id)
        steps = None if parsed.has("allocations") else _srun_steps(client, jobs)
    records = _records(jobs, steps)
    records = only_components(records, het_components(parsed.all("jobs")))  # -j 516+1
    names = set(parsed.all("name"))
    if names:
        records = [r for r in records if r.name in names]
    states = {_SHORT_STATES.get(s.upper(), s.upper()) for s in parsed.all("state")}
    if states and "ALL" not in states:
        records = [r for r in records if r.state in states]
    records = _collapse_pending_arrays(records)
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


# Slurm's states (long and short) as the gpuyard statuses that show as them.
_STATUS_OF = {
    "PENDING": "queued", "PD": "queued", "REQUEUED": "queued", "RQ": "queued",
    "RUNNING": "running", "R": "running", "COMPLETING": "running", "CG": "running",
    "SUSPENDED": "running", "S": "running",
    "COMPLETED": "succeeded", "CD": "succeeded", "FAILED": "failed", "F": "failed",
    "CANCELLED": "stopped", "CA": "stopped", "TIMEOUT": "expired", "TO": "expired",
}  # fmt: skip


def _statuses(states: Iterable[str]) -> list[str] | None:
    """The statuses to ask the pool for, for Slurm's ``--state`` list (empty: all of them;
    None: none can match, as for the states gpuyard never shows, NODE_FAIL, ...)."""
    wanted = [s for s in states if s]
    if not wanted or "ALL" in wanted:
        return []
    return sorted({_STATUS_OF[s] for s in wanted if s in _STATUS_OF}) or None


def _sacct_window(parsed: _Args) -> tuple[float, float]:
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


def _collapse_pending_arrays(records: list[JobRecord]) -> list[JobRecord]:
    """An array's pending tasks are one row, ``A_[2-9%2]``, as Slurm shows them."""
    pending: dict[int, list[JobRecord]] = {}
    out: list[JobRecord] = []
    for record in records:
        if record.array_job_id is not None and record.state == "PENDING":
            if record.array_job_id not in pending:
                out.append(record)  # its place in the listing
            pending.setdefault(record.array_job_id, []).append(record)
        else:
            out.append(record)
    for index, record in enumerate(out):
        group = pending.get(record.array_job_id or -1)
        if record.state != "PENDING" or not group or len(group) == 1:
            continue
        text = _index_ranges(sorted(int(r.array_task or 0) for r in group))
        if record.array_throttle:
            text += f"%{record.array_throttle}"
        out[index] = dataclasses.replace(
            record, array_task=f"[{text}]", job_id=record.array_job_id or record.job_id
        )
    return out


def _index_ranges(numbers: Sequence[int]) -> str:
    """``[2, 3, 4, 7]`` → ``2-4,7``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# --- squeue ------------------------------------------------------------------------------

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
_SHORT_STATES = {
    "PD": "PENDING",
    "R": "RUNNING",
    "CG": "COMPLETING",
    "CD": "COMPLETED",
    "CA": "CANCELLED",
    "F": "FAILED",
    "TO": "TIMEOUT",
    "S": "SUSPENDED",
    "PR": "PREEMPTED",
    "NF": "NODE_FAIL",
    "RQ": "REQUEUED",
}


def squeue(args: Sequence[str], out: TextIO) -> int:
    parsed = _Args(args, _SQUEUE_VALUED, _SQUEUE_FLAGS)
    if parsed.has("json"):
        return _squeue_json(parsed, out)
    fmt = parsed.last("format")
    _, problems = render.squeue_format(fmt)
    states = {_SHORT_STATES.get(s.upper(), s.upper()) for s in parsed.all("states")}
    ids = parsed.all("jobs")
    with _client() as client:
        if ids:
            try:
                jobs = _jobs_for(client, _parse_ids(ids))
            except BadJobId:
                jobs = []
            if not jobs:
                print(render.SQUEUE_INVALID_JOB, file=sys.stderr)
                return 1
        else:
            owner = parsed.last("user") or (client.user if parsed.has("me") else None)
            # Only what Slurm keeps in memory: active jobs, and those ended within MinJobAge
            # (300 s) when states are asked for; the pool selects them, not this client.
            statuses = _statuses(states) if states else ["queued", "running"]
            jobs = _all_jobs(
                client,
                owner=owner,
                status=statuses,
                active_after=time.time() - 300 if states else None,
            )
    now = time.time()
    records = _squeue_select(_records(jobs), parsed, states, listed=bool(ids), now=now)
    for problem in problems:
        print(problem, file=sys.stderr)  # Slurm still prints the table and exits 0
    out.write(
        render.render_squeue(
            render.squeue_sort(records), fmt=fmt, header=not parsed.has("noheader"), now=now
        )
    )
    return 0


def _squeue_json(parsed: _Args, out: TextIO) -> int:
    """``squeue --json``: every job the controller still holds (active, or ended within
    MinJobAge, 300 s), in job id order. Slurm 22.05 ignores ``-j`` here and prints them all;
    we honour ``-j`` (as Slurm 23.02 does), because torchx's status call, ``squeue --json -j
    ID``, reads every job listed as one of the app's replicas."""
    ids = parsed.all("jobs")
    with _client() as client:
        if ids:
            try:
                jobs = _jobs_for(client, _parse_ids(ids))
            except BadJobId:
                jobs = []
        else:
            owner = parsed.last("user") or (client.user if parsed.has("me") else None)
            jobs = _all_jobs(client, owner=owner, status=[], active_after=time.time() - 300)
    now = time.time()
    records = [
        r
        for r in sorted(_records(jobs), key=lambda r: r.job_id)
        if r.end is None or now - r.end < 300
    ]
    out.write(openapi.dumps(openapi.squeue_document(_collapse_pending_arrays(records))))
    return 0


def _squeue_select(
    records: list[JobRecord], parsed: _Args, states: set[str], *, listed: bool, now: float
) -> list[JobRecord]:
    """The rows squeue shows: by state (pending and running unless told; a job asked for by
    id stays visible for MinJobAge, 300 s, after it ends, as in Slurm), partition and name."""
    if states and "ALL" not in states:
        records = [r for r in records if r.state in states]
    elif not states and not listed:
        records = [
            r for r in records if r.state in ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
        ]
    elif not states:
        records = [r for r in records if r.end is None or now - r.end < 300]
    partitions, names = set(parsed.all("partition")), set(parsed.all("name"))
    if partitions:
        records = [r for r in records if r.partition in partitions]
    if names:
        records = [r for r in records if r.name in names]
    return records if parsed.has("array") else _collapse_pending_arrays(records)


# --- sinfo -------------------------------------------------------------------------------

_SINFO_VALUED = {
    "-o": "format",
    "--format": "format",
    "-p": "partition",
    "--partition": "partition",
    "-t": "states",
    "--states": "states",
    "-n": "nodes",
    "--nodes": "nodes",
    "-M": "clusters",
    "--clusters": "clusters",
}
_SINFO_FLAGS = {
    "-h": "noheader",
    "--noheader": "noheader",
    "-N": "node",
    "--Node": "node",
    "-s": "summarize",
    "--summarize": "summarize",
    "-R": "reasons",
    "--list-reasons": "reasons",
    "--noconvert": "noconvert",
    "-a": "all",
    "--all": "all",
    "-l": "long",
    "--long": "long",
    "-e": "exact",
    "--exact": "exact",
    "-r": "responding",
    "--responding": "responding",
    "-d": "dead",
    "--dead": "dead",
}


def _node_state(state: NodeState, gpus_used: int, cpus_used: float, cpus: float) -> str:
    if state is NodeState.GONE:
        return "down"
    if state is NodeState.CORDONED:
        return "drained" if not (gpus_used or cpus_used) else "draining"
    if not gpus_used and not cpus_used:
        return "idle"
    return "allocated" if cpus_used >= cpus else "mixed"


def sinfo(args: Sequence[str], out: TextIO) -> int:
    parsed = _Args(args, _SINFO_VALUED, _SINFO_FLAGS)
    with _client() as client:
        nodes = client.nodes()
    by_pool: dict[str, list[str]] = {}
    records = []
    for node in nodes:
        pool = node.labels.get("pool") or DEFAULT_POOL
        by_pool.setdefault(pool, []).append(node.name)
        records.append(
            NodeRecord(
                name=node.name,
                partitions=(pool,),
                state=_node_state(node.state, node.gpus_used, node.cpus_used, node.cpus),
                cpus=int(node.cpus),
                cpus_alloc=int(node.cpus_used),
                memory_mb=node.memory >> 20,
                memory_alloc_mb=node.memory_used >> 20,
                gpus=node.gpus,
                gpus_alloc=node.gpus_used,
                address=node.address,
                features=tuple(f"{k}={v}" for k, v in sorted(node.labels.items())),
                reason=node.labels.get("reason", ""),
            )
        )
    partitions = [
        PartitionRecord(name=name, default=name == DEFAULT_POOL, nodes=tuple(names))
        for name, names in sorted(by_pool.items(), key=lambda kv: (kv[0] != DEFAULT_POOL, kv[0]))
    ]
    wanted = set(parsed.all("partition"))
    if wanted:
        partitions = [p for p in partitions if p.name in wanted]
    text, errors = render.render_sinfo(
        records,
        partitions,
        fmt=parsed.last("format"),
        node_oriented=parsed.has("node"),
        summarize=parsed.has("summarize"),
        reasons=parsed.has("reasons"),
        header=not parsed.has("noheader"),
    )
    for line in errors:
        print(line, file=sys.stderr)
    out.write(text)
    return 0


def srun(args: Sequence[str], out: TextIO) -> int:
    raise CommandError(
        "srun starts job steps inside an allocation only: put it in a script and submit that "
        "with sbatch, or run it under salloc (docs/slurm.md)"
    )


COMMANDS: dict[str, Callable[[Sequence[str], TextIO], int]] = {
    "sacct": sacct,
    "squeue": squeue,
    "sinfo": sinfo,
    "srun": srun,
    "salloc": salloc,
}
