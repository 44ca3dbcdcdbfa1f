"""Print jobs, nodes and partitions exactly as Slurm 22.05's commands do.

Pure functions over the records of :mod:`gpuyard.slurm.records` (no I/O, stdlib only). Each
returns the text for stdout, ending in a newline where Slurm's does; the tests compare them byte
for byte with outputs recorded from a real Slurm 22.05.8 (``tests/data/slurm``). Selection and
order are the caller's: pass the records Slurm would list, in the order it lists them
(:func:`squeue_sort` and :func:`sinfo_rows` give Slurm's default orders). Every renderer is
total: odd values (empty names, huge numbers, missing times) never raise; only the parsers of
user-written formats raise :class:`SlurmFormatError`, carrying Slurm's own message.

Times are printed in ``tz`` (default: the local zone, as Slurm does), ``now`` is epoch seconds.

sacct
    ``sacct_fields(spec: str | None) -> list[SacctField]`` parses ``-o/--format``
    (``JobID%20,state``; names case-insensitive and matched by prefix, as Slurm does; None: the
    default columns). Unknown name: ``SlurmFormatError('sacct: error: Invalid field requested:
    "Bogus"')`` (Slurm exits 1).

    ``render_sacct(jobs, *, fields=None, mode="table"|"parsable"|"parsable2", header=True,
    allocations=False, duplicates=False, now, tz=None) -> str``: ``allocations`` is ``-X``
    (no step rows), ``duplicates`` is ``-D`` (without it only the last record of each job id
    is printed: a requeued job's earlier attempts are records with the same ``job_id`` and
    state REQUEUED, listed before the last one).

squeue
    ``squeue_format(spec: str | None) -> tuple[list[SqueueField], list[str]]`` parses ``-o``
    (``%.18i %9P %j``; None: the default table). An unknown or malformed ``%`` spec is kept as
    literal text and reported in the second list (``squeue: error: Invalid job format
    specification: !``), as Slurm does (it still prints the table and exits 0).

    ``render_squeue(jobs, *, fmt=None, header=True, now, tz=None) -> str``.
    ``squeue_sort(jobs) -> list[JobRecord]``: Slurm's default order (partition, short state
    code, priority descending; ties in job id order).

sinfo
    ``render_sinfo(nodes, partitions, *, fmt=None, node_oriented=False, summarize=False,
    reasons=False, header=True, tz=None) -> tuple[str, list[str]]`` (stdout, stderr lines):
    ``node_oriented`` is ``-N``, ``summarize`` is ``-s``, ``reasons`` is ``-R``.
    ``--noconvert`` changes nothing here (memory is already in MB). ``SINFO_VERSION`` is what
    ``sinfo --version`` prints (without the newline).

scontrol / sbatch
    ``render_scontrol_show_job(job, *, now, tz=None) -> str``,
    ``render_show_hostnames(text) -> str`` (ValueError for malformed lists; Slurm prints
    ``Invalid hostlist: <text>`` on stderr, see :data:`INVALID_HOSTLIST`),
    ``render_show_hostlist(text) -> str``, ``render_sbatch_submitted(job_id, *, parsable=False)``.
    ``hostlist_ranged(names) -> str`` is scontrol's order-keeping form (sacct/squeue/sinfo node
    lists are sorted first, as Slurm's bitmaps are).

Errors: ``SACCT_BAD_JOB``, ``SQUEUE_INVALID_JOB``, ``SCONTROL_*``, ``SCANCEL_BAD_ID``,
``SBATCH_*`` are Slurm's exact stderr texts (``str.format`` fields), with the exit status in a
comment next to each.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuyard.hostlist import compress_hostlist, expand_hostlist
from gpuyard.models.slurm import SlurmState
from gpuyard.slurm.records import JobRecord, NodeRecord, PartitionRecord, StepRecord

__all__ = [
    "INVALID_HOSTLIST",
    "SACCT_BAD_FIELD",
    "SACCT_BAD_JOB",
    "SACCT_FIELDS",
    "SBATCH_BAD_TIME",
    "SBATCH_NO_FILE",
    "SBATCH_UNRECOGNIZED",
    "SCANCEL_BAD_ID",
    "SCONTROL_REQUEUE_INVALID",
    "SCONTROL_SHOW_JOB_INVALID",
    "SINFO_VERSION",
    "SQUEUE_INVALID_JOB",
    "SacctField",
    "SlurmFormatError",
    "SqueueField",
    "compact_state",
    "hostlist_ranged",
    "render_sacct",
    "render_sbatch_submitted",
    "render_scontrol_show_job",
    "render_show_hostlist",
    "render_show_hostnames",
    "render_sinfo",
    "render_squeue",
    "sacct_fields",
    "squeue_format",
    "squeue_sort",
]

SINFO_VERSION = "slurm-wlm 22.05.8"
INVALID_HOSTLIST = "Invalid hostlist: {text}"
"""What ``scontrol show hostnames`` writes on stderr for a malformed list (it still exits 0)."""


# Errors the commands print (the lead's commands write them on stderr; the exit status follows).
SACCT_BAD_JOB = "sacct: fatal: Bad job/step specified: {text}"  # exit 1
SACCT_BAD_FIELD = 'sacct: error: Invalid field requested: "{name}"'  # exit 1
SQUEUE_INVALID_JOB = "slurm_load_jobs error: Invalid job id specified"  # exit 1
SCONTROL_SHOW_JOB_INVALID = "slurm_load_jobs error: Invalid job id specified"  # exit 1
SCONTROL_REQUEUE_INVALID = "Invalid job id specified for job {text}"  # exit 1
SCANCEL_BAD_ID = "scancel: error: Invalid job id {text}"  # exit 1; an unknown number: silent, 0
SBATCH_UNRECOGNIZED = (
    "sbatch: unrecognized option '{option}'\nTry \"sbatch --help\" for more information"
)
"""exit 255"""
SBATCH_BAD_TIME = "sbatch: error: Invalid --time specification"  # exit 255
SBATCH_NO_FILE = "sbatch: error: Unable to open file {path}"  # exit 1


class SlurmFormatError(ValueError):
    """A user-written format Slurm refuses; ``str()`` is Slurm's stderr line."""


# --- shared formatting -------------------------------------------------------------------------

_ACTIVE = frozenset(
    {
        SlurmState.PENDING,
        SlurmState.RUNNING,
        SlurmState.SUSPENDED,
        SlurmState.COMPLETING,
        SlurmState.CONFIGURING,
    }
)

_COMPACT: dict[str, str] = {
    SlurmState.PENDING: "PD",
    SlurmState.RUNNING: "R",
    SlurmState.SUSPENDED: "S",
    SlurmState.COMPLETED: "CD",
    SlurmState.CANCELLED: "CA",
    SlurmState.FAILED: "F",
    SlurmState.TIMEOUT: "TO",
    SlurmState.NODE_FAIL: "NF",
    SlurmState.PREEMPTED: "PR",
    SlurmState.BOOT_FAIL: "BF",
    SlurmState.DEADLINE: "DL",
    SlurmState.OUT_OF_MEMORY: "OOM",
    SlurmState.COMPLETING: "CG",
    SlurmState.CONFIGURING: "CF",
    SlurmState.REQUEUED: "RQ",
    SlurmState.REQUEUE_FED: "RF",
    SlurmState.REQUEUE_HOLD: "RH",
    SlurmState.RESIZING: "RS",
    SlurmState.REVOKED: "RV",
    SlurmState.SIGNALING: "SI",
    SlurmState.SPECIAL_EXIT: "SE",
    SlurmState.STAGE_OUT: "SO",
    SlurmState.STOPPED: "ST",
}


def compact_state(state: str) -> str:
    """squeue's ``%t``: RUNNING -> R, OUT_OF_MEMORY -> OOM (unknown words pass through)."""
    return _COMPACT.get(state.upper(), state.upper()[:2])


def _as_int(value: float | None) -> int:
    if value is None:
        return 0
    try:
        return int(value)
    except (OverflowError, ValueError):
        return 0


def _date(value: float | None, tz: dt.tzinfo | None, missing: str = "Unknown") -> str:
    if value is None or value <= 0:
        return missing
    try:
        when = dt.datetime.fromtimestamp(value, tz) if tz else dt.datetime.fromtimestamp(value)
    except (OverflowError, OSError, ValueError):
        return missing
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def _hms(seconds: float | None) -> str:
    """sacct/scontrol durations: ``00:01:27``, ``2-00:00:00``."""
    total = max(_as_int(seconds), 0)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _short_time(seconds: float | None) -> str:
    """squeue's durations: ``0:13``, ``1:02:03``, ``2-00:00:00``."""
    total = max(_as_int(seconds), 0)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def nodelist(nodes: Iterable[str]) -> str:
    """Slurm's node list: sorted naturally and bracketed (``n[0001-0003]``)."""
    return compress_hostlist(sorted(nodes, key=_natural_key))


def _natural_key(name: str) -> tuple[str, int, str]:
    match = re.match(r"^(.*?)(\d+)$", name)
    if match is None:
        return (name, -1, name)
    return (match.group(1), int(match.group(2)), name)


def _run_seconds(job: JobRecord, now: float) -> float:
    if job.start is None or job.state == SlurmState.PENDING:
        return 0.0
    if job.state in _ACTIVE:
        return max(now - job.start, 0.0)
    if job.end is None:
        return max(now - job.start, 0.0)
    return max(job.end - job.start, 0.0)


def _fit(value: str, width: int, right: bool, plus: bool) -> str:
    """Pad to ``width``; longer values are cut (``+`` marks the cut in sacct)."""
    if width <= 0:
        return value
    if len(value) > width:
        value = value[: width - 1] + "+" if plus else value[:width]
    return value.rjust(width) if right else value.ljust(width)


# --- sacct -------------------------------------------------------------------------------------

# (name, default width; negative = left-aligned), Slurm 22.05's src/sacct/sacct.c order: a
# field given by prefix is the first one here that it starts.
_SACCT_TABLE: tuple[tuple[str, int], ...] = (
    ("Account", 10),
    ("AdminComment", 15),
    ("AllocCPUS", 10),
    ("AllocNodes", 10),
    ("AllocTRES", 10),
    ("AssocID", 7),
    ("AveCPU", 10),
    ("AveCPUFreq", 10),
    ("AveDiskRead", 14),
    ("AveDiskWrite", 14),
    ("AvePages", 10),
    ("AveRSS", 10),
    ("AveVMSize", 10),
    ("BlockID", 16),
    ("Cluster", 10),
    ("Comment", 14),
    ("Constraints", 19),
    ("ConsumedEnergy", 14),
    ("ConsumedEnergyRaw", 17),
    ("Container", 19),
    ("CPUTime", 10),
    ("CPUTimeRAW", 10),
    ("DBIndex", -21),
    ("DerivedExitCode", 15),
    ("Elapsed", 10),
    ("ElapsedRaw", 10),
    ("Eligible", 19),
    ("End", 19),
    ("ExitCode", 8),
    ("Flags", 19),
    ("GID", 6),
    ("Group", 9),
    ("JobID", -12),
    ("JobIDRaw", -12),
    ("JobName", 10),
    ("Layout", 9),
    ("MaxDiskRead", 12),
    ("MaxDiskReadNode", 15),
    ("MaxDiskReadTask", 15),
    ("MaxDiskWrite", 12),
    ("MaxDiskWriteNode", 16),
    ("MaxDiskWriteTask", 16),
    ("MaxPages", 8),
    ("MaxPagesNode", 12),
    ("MaxPagesTask", 14),
    ("MaxRSS", 10),
    ("MaxRSSNode", 10),
    ("MaxRSSTask", 10),
    ("MaxVMSize", 10),
    ("MaxVMSizeNode", 14),
    ("MaxVMSizeTask", 14),
    ("McsLabel", 12),
    ("MinCPU", 10),
    ("MinCPUNode", 10),
    ("MinCPUTask", 10),
    ("NCPUS", 10),
    ("NNodes", 8),
    ("NodeList", 15),
    ("NTasks", 8),
    ("Partition", 10),
    ("Priority", 10),
    ("QOS", 10),
    ("QOSRAW", 6),
    ("Reason", 22),
    ("ReqCPUFreq", 10),
    ("ReqCPUFreqGov", 13),
    ("ReqCPUFreqMax", 13),
    ("ReqCPUFreqMin", 13),
    ("ReqCPUS", 8),
    ("ReqMem", 10),
    ("ReqNodes", 8),
    ("ReqTRES", 10),
    ("Reservation", 20),
    ("ReservationId", 8),
    ("Reserved", 10),
    ("ResvCPU", 10),
    ("ResvCPURAW", 10),
    ("Start", 19),
    ("State", 10),
    ("Submit", 19),
    ("SubmitLine", 20),
    ("Suspended", 10),
    ("SystemComment", 15),
    ("SystemCPU", 10),
    ("Timelimit", 10),
    ("TimelimitRaw", 10),
    ("TotalCPU", 10),
    ("TRESUsageInAve", 14),
    ("TRESUsageInMax", 14),
    ("TRESUsageInMaxNode", 18),
    ("TRESUsageInMaxTask", 18),
    ("TRESUsageInMin", 14),
    ("TRESUsageInMinNode", 18),
    ("TRESUsageInMinTask", 18),
    ("TRESUsageInTot", 14),
    ("TRESUsageOutAve", 15),
    ("TRESUsageOutMax", 15),
    ("TRESUsageOutMaxNode", 19),
    ("TRESUsageOutMaxTask", 19),
    ("TRESUsageOutMin", 15),
    ("TRESUsageOutMinNode", 19),
    ("TRESUsageOutMinTask", 19),
    ("TRESUsageOutTot", 15),
    ("UID", 6),
    ("User", 9),
    ("UserCPU", 10),
    ("WCKey", 10),
    ("WCKeyID", 10),
    ("WorkDir", 20),
)
_SACCT_DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
SACCT_FIELDS: tuple[str, ...] = tuple(name for name, _ in _SACCT_TABLE)
"""Every field sacct 22.05 accepts (``sacct --helpformat``); those without a fact print empty."""


@dataclass(frozen=True, slots=True)
class SacctField:
    name: str
    """Slurm's spelling (the header): ``JobID``."""
    width: int
    """Negative: left-aligned (JobID, JobIDRaw); a ``%N`` override is right-aligned."""


def sacct_fields(spec: str | None = None) -> list[SacctField]:
    """``-o JobID%20,state`` -> fields; None or empty: sacct's default columns."""
    fields: list[SacctField] = []
    for raw in (spec or _SACCT_DEFAULT).split(","):
        item = raw.strip()
        if not item:
            continue
        name, _, width_text = item.partition("%")
        width_override = 0
        if width_text:
            match = re.match(r"^-?\d+", width_text)
            width_override = int(match.group()) if match else 0
        lowered = name.lower()
        found = next((f for f in _SACCT_TABLE if f[0].lower().startswith(lowered)), None)
        if found is None or not lowered:
            raise SlurmFormatError(SACCT_BAD_FIELD.format(name=name))
        fields.append(SacctField(found[0], width_override or found[1]))
    return fields


def _exit(code: int, signal: int) -> str:
    """``3:0``; a negative code (no exit status recorded) prints nothing, as sacct does."""
    return "" if code < 0 else f"{code}:{signal}"


def _sacct_state(job: JobRecord) -> str:
    if job.state == SlurmState.CANCELLED and job.cancelled_by is not None:
        return f"CANCELLED by {job.cancelled_by}"
    return job.state


def _elapsed_job(job: JobRecord, now: float) -> float:
    if job.start is None or job.state == SlurmState.PENDING:
        return 0.0
    end = job.end if job.state not in _ACTIVE and job.end is not None else now
    return max(end - job.start, 0.0)


def _elapsed_step(step: StepRecord, now: float) -> float:
    if step.start is None:
        return 0.0
    end = step.end if step.state not in _ACTIVE and step.end is not None else now
    return max(end - step.start, 0.0)


def _limit_minutes(limit: float | None) -> str:
    return "UNLIMITED" if limit is None else str(_as_int(limit) // 60)


def _sacct_job_value(name: str, job: JobRecord, now: float, tz: dt.tzinfo | None) -> str:
    elapsed = _elapsed_job(job, now)
    active = job.state in _ACTIVE
    values: dict[str, Callable[[], str]] = {
        "Account": lambda: job.account,
        "AllocCPUS": lambda: str(job.num_cpus),
        "NCPUS": lambda: str(job.num_cpus),
        "AllocNodes": lambda: str(job.num_nodes if job.nodes else 0),
        "Comment": lambda: job.comment,
        "AllocTRES": lambda: (
            f"billing={job.num_cpus},cpu={job.num_cpus},node={job.num_nodes}" if job.nodes else ""
        ),
        "CPUTime": lambda: _hms(elapsed * job.num_cpus),
        "CPUTimeRAW": lambda: str(_as_int(elapsed) * job.num_cpus),
        "DerivedExitCode": lambda: "0:0",
        "Elapsed": lambda: _hms(elapsed),
        "ElapsedRaw": lambda: str(_as_int(elapsed)),
        "Eligible": lambda: _date(job.eligible, tz),
        "End": lambda: "Unknown" if active else _date(job.end, tz),
        "ExitCode": lambda: _exit(job.exit_code, job.signal),
        "GID": lambda: str(job.gid),
        "Group": lambda: job.group,
        "JobID": lambda: job.display_id,
        "JobIDRaw": lambda: str(job.job_id),
        "JobName": lambda: job.name,
        "NNodes": lambda: str(job.num_nodes),
        "NodeList": lambda: nodelist(job.nodes) if job.nodes else "None assigned",
        "Partition": lambda: job.partition,
        "Priority": lambda: str(job.priority),
        "QOS": lambda: job.qos,
        "Reason": lambda: job.reason,
        "ReqCPUS": lambda: str(job.num_cpus),
        "ReqNodes": lambda: str(job.num_nodes),
        "Start": lambda: "Unknown" if job.state == SlurmState.PENDING else _date(job.start, tz),
        "State": lambda: _sacct_state(job),
        "Submit": lambda: _date(job.submit, tz),
        "Suspended": lambda: "00:00:00",
        "Timelimit": lambda: "UNLIMITED" if job.time_limit is None else _hms(job.time_limit),
        "TimelimitRaw": lambda: _limit_minutes(job.time_limit),
        "UID": lambda: str(job.uid),
        "User": lambda: job.user,
        "WorkDir": lambda: job.work_dir,
    }
    getter = values.get(name)
    return getter() if getter else ""


def _sacct_step_value(
    name: str, job: JobRecord, step: StepRecord, now: float, tz: dt.tzinfo | None
) -> str:
    elapsed = _elapsed_step(step, now)
    active = step.state in _ACTIVE
    values: dict[str, Callable[[], str]] = {
        "Account": lambda: job.account,
        "AllocCPUS": lambda: str(step.cpus),
        # The extern step holds the allocation (billed); the others only use CPUs of it.
        "AllocTRES": lambda: (
            f"billing={step.cpus},cpu={step.cpus},node={len(step.nodes)}"
            if step.name == "extern"
            else f"cpu={step.cpus},mem=0,node={len(step.nodes)}"
        ),
        "NCPUS": lambda: str(step.cpus),
        "AllocNodes": lambda: str(len(step.nodes)),
        "CPUTime": lambda: _hms(elapsed * step.cpus),
        "CPUTimeRAW": lambda: str(_as_int(elapsed) * step.cpus),
        "Elapsed": lambda: _hms(elapsed),
        "ElapsedRaw": lambda: str(_as_int(elapsed)),
        "Eligible": lambda: _date(step.start, tz),
        "End": lambda: "Unknown" if active else _date(step.end, tz),
        "ExitCode": lambda: _exit(step.exit_code, step.signal),
        "JobID": lambda: f"{job.display_id}.{step.name}",
        "JobIDRaw": lambda: f"{job.job_id}.{step.name}",
        "JobName": lambda: step.job_name or step.name,
        "NNodes": lambda: str(len(step.nodes)),
        "NodeList": lambda: nodelist(step.nodes) if step.nodes else "None assigned",
        "NTasks": lambda: str(step.tasks),
        "ReqCPUS": lambda: str(step.cpus),
        "ReqNodes": lambda: str(len(step.nodes)),
        "Start": lambda: _date(step.start, tz),
        "State": lambda: step.state,
        "Submit": lambda: _date(step.start, tz),
        "Suspended": lambda: "00:00:00",
    }
    getter = values.get(name)
    return getter() if getter else ""


def render_sacct(
    jobs: Sequence[JobRecord],
    *,
    fields: str | Sequence[SacctField] | None = None,
    mode: Literal["table", "parsable", "parsable2"] = "table",
    header: bool = True,
    allocations: bool = False,
    duplicates: bool = False,
    now: float,
    tz: dt.tzinfo | None = None,
) -> str:
    """sacct's stdout for ``jobs`` (raises SlurmFormatError only for a bad ``fields`` text)."""
    columns = sacct_fields(fields) if fields is None or isinstance(fields, str) else list(fields)
    shown = list(jobs)
    if not duplicates:
        last = {job.job_id: index for index, job in enumerate(shown)}
        shown = [job for index, job in enumerate(shown) if last[job.job_id] == index]
    rows: list[list[str]] = []
    for job in shown:
        rows.append([_sacct_job_value(c.name, job, now, tz) for c in columns])
        if allocations:
            continue
        for step in job.steps:
            rows.append([_sacct_step_value(c.name, job, step, now, tz) for c in columns])
    lines: list[str] = []
    if mode == "table":
        if header:
            lines.append(
                "".join(
                    _fit(c.name[: abs(c.width)], abs(c.width), c.width > 0, False) + " "
                    for c in columns
                )
            )
            lines.append("".join("-" * abs(c.width) + " " for c in columns))
        for row in rows:
            lines.append(
                "".join(
                    _fit(value, abs(c.width), c.width > 0, True) + " "
                    for c, value in zip(columns, row, strict=True)
                )
            )
    else:
        end = "|" if mode == "parsable" else ""
        if header:
            lines.append("|".join(c.name for c in columns) + end)
        lines.extend("|".join(row) + end for row in rows)
    return "".join(line + "\n" for line in lines)


# --- squeue ------------------------------------------------------------------------------------

_SQUEUE_HEADERS = {
    "a": "ACCOUNT",
    "A": "JOBID",
    "b": "TRES_PER_NODE",
    "c": "MIN_CPUS",
    "C": "CPUS",
    "D": "NODES",
    "e": "END_TIME",
    "E": "DEPENDENCY",
    "F": "ARRAY_JOB_ID",
    "g": "GROUP",
    "G": "GROUP",
    "h": "OVER_SUBSCRIBE",
    "i": "JOBID",
    "j": "NAME",
    "k": "COMMENT",
    "K": "ARRAY_TASK_ID",
    "l": "TIME_LIMIT",
    "L": "TIME_LEFT",
    "m": "MIN_MEMORY",
    "M": "TIME",
    "N": "NODELIST",
    "o": "COMMAND",
    "P": "PARTITION",
    "q": "QOS",
    "Q": "PRIORITY",
    "r": "REASON",
    "R": "NODELIST(REASON)",
    "S": "START_TIME",
    "t": "ST",
    "T": "STATE",
    "u": "USER",
    "U": "UID",
    "V": "SUBMIT_TIME",
    "y": "NICE",
    "Z": "WORK_DIR",
}
_SQUEUE_DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"


@dataclass(frozen=True, slots=True)
class SqueueField:
    """One ``%[.][width]code`` of squeue's ``-o`` (code "" is literal text only)."""

    code: str
    width: int = 0
    right: bool = False
    suffix: str = ""
    """Literal text printed after the field (and before the first field, for the prefix)."""


def squeue_format(spec: str | None = None) -> tuple[list[SqueueField], list[str]]:
    """Parse ``-o``; returns the fields and the stderr lines Slurm prints for bad specs."""
    text = _SQUEUE_DEFAULT if spec is None else spec
    fields: list[SqueueField] = []
    errors: list[str] = []
    prefix, _, rest = text.partition("%") if "%" in text else (text, "", "")
    if prefix or "%" not in text:
        fields.append(SqueueField("", suffix=prefix))
    if "%" not in text:
        return fields, errors
    pieces = ("%" + rest).split("%")[1:]
    pending_literal = ""
    for piece in pieces:
        match = re.match(r"^(\.?)(\d*)([A-Za-z])", piece)
        if match is None or match.group(3) not in _SQUEUE_HEADERS:
            bad = piece[:1] if match is None else match.group(3)
            errors.append(f"squeue: error: Invalid job format specification: {bad}")
            literal = "%" + piece
            if fields:
                last = fields[-1]
                fields[-1] = SqueueField(last.code, last.width, last.right, last.suffix + literal)
            else:
                pending_literal += literal
                fields.append(SqueueField("", suffix=pending_literal))
            continue
        right, digits, code = match.groups()
        fields.append(
            SqueueField(code, int(digits) if digits else 0, bool(right), piece[match.end() :])
        )
    return fields, errors


def _squeue_value(code: str, job: JobRecord, now: float, tz: dt.tzinfo | None) -> str:
    def reason_or_nodes() -> str:
        if job.state in (SlurmState.PENDING, SlurmState.TIMEOUT, SlurmState.FAILED):
            return f"({job.reason or 'None'})"
        return nodelist(job.nodes)

    def time_left() -> str:
        if job.time_limit is None:
            return "UNLIMITED"
        left = job.time_limit - _run_seconds(job, now)
        return "INVALID" if left < 0 or job.state not in _ACTIVE else _short_time(left)

    def task_id() -> str:
        if job.array_task is None:
            return "N/A"
        return job.array_task.strip("[]")

    values: dict[str, Callable[[], str]] = {
        "a": lambda: job.account or "(null)",
        "A": lambda: str(job.job_id),
        "b": lambda: f"gres:gpu:{job.gpus_per_node}" if job.gpus_per_node else "N/A",
        "c": lambda: str(job.min_cpus_per_node),
        "C": lambda: str(job.num_cpus),
        "D": lambda: str(job.num_nodes),
        # a started job without an end (no limit) prints NONE; one not started, N/A
        "e": lambda: _date(job.end, tz, "NONE" if job.start is not None else "N/A"),
        "E": lambda: job.dependency or "(null)",
        "F": lambda: str(job.array_job_id if job.array_job_id is not None else job.job_id),
        "g": lambda: job.group,
        "G": lambda: str(job.gid),
        "h": lambda: "NO" if job.exclusive else "OK",
        "i": lambda: job.display_id,
        "j": lambda: job.name,
        "k": lambda: job.comment or "(null)",
        "K": task_id,
        "l": lambda: "UNLIMITED" if job.time_limit is None else _short_time(job.time_limit),
        "L": time_left,
        "m": lambda: f"{job.memory_mb}M" if job.memory_mb else "0",
        "M": lambda: _short_time(_run_seconds(job, now)),
        "N": lambda: nodelist(job.nodes),
        "o": lambda: job.command or "(null)",
        "P": lambda: job.partition,
        "q": lambda: job.qos,
        "Q": lambda: str(job.priority),
        "r": lambda: job.reason or "None",
        "R": reason_or_nodes,
        "S": lambda: _date(job.start, tz, "N/A"),
        "t": lambda: compact_state(job.state),
        "T": lambda: job.state,
        "u": lambda: job.user,
        "U": lambda: str(job.uid),
        "V": lambda: _date(job.submit, tz, "N/A"),
        "y": lambda: str(job.nice),
        "Z": lambda: job.work_dir,
    }
    getter = values.get(code)
    return getter() if getter else ""


def _squeue_line(fields: Sequence[SqueueField], value: Callable[[str], str]) -> str:
    parts: list[str] = []
    for field in fields:
        if field.code:
            parts.append(_fit(value(field.code), field.width, field.right, False))
        parts.append(field.suffix)
    return "".join(parts)


def render_squeue(
    jobs: Sequence[JobRecord],
    *,
    fmt: str | None = None,
    header: bool = True,
    now: float,
    tz: dt.tzinfo | None = None,
) -> str:
    """squeue's stdout for ``jobs`` (in the order given); see :func:`squeue_format` for errors."""
    fields, _ = squeue_format(fmt)
    lines: list[str] = []
    if header:
        lines.append(_squeue_line(fields, _SQUEUE_HEADERS.__getitem__))
    for job in jobs:
        lines.append(_squeue_line(fields, _bind_squeue(job, now, tz)))
    return "".join(line + "\n" for line in lines)


def _bind_squeue(job: JobRecord, now: float, tz: dt.tzinfo | None) -> Callable[[str], str]:
    return lambda code: _squeue_value(code, job, now, tz)


def squeue_sort(jobs: Iterable[JobRecord]) -> list[JobRecord]:
    """Slurm's default order (``-S P,t,-p``): partition, ``%t`` code, priority descending."""
    return sorted(jobs, key=lambda j: (j.partition, compact_state(j.state), -j.priority, j.job_id))


# --- sinfo -------------------------------------------------------------------------------------

_NODE_STATE_VALUE = {
    "unknown": 0,
    "down": 1,
    "idle": 2,
    "allocated": 3,
    "error": 4,
    "mixed": 5,
    "future": 6,
    "drained": 0x200 | 2,
    "draining": 0x200 | 5,
    "completing": 0x400 | 3,
    "maint": 0x8000 | 2,
    "reserved": 0x20 | 2,
    "planned": 0x20 | 2,
    "fail": 0x2000 | 2,
    "failing": 0x2000 | 3,
    "inval": 0,
}
_NODE_COMPACT = {
    "allocated": "alloc",
    "completing": "comp",
    "down": "down",
    "drained": "drain",
    "draining": "drng",
    "error": "err",
    "fail": "fail",
    "failing": "failg",
    "future": "futr",
    "idle": "idle",
    "maint": "maint",
    "mixed": "mix",
    "planned": "plnd",
    "reserved": "resv",
    "unknown": "unk",
    "inval": "inval",
}
_SINFO_HEADERS = {
    "a": "AVAIL",
    "A": "NODES(A/I)",
    "c": "CPUS",
    "D": "NODES",
    "E": "REASON",
    "f": "AVAIL_FEATURES",
    "F": "NODES(A/I/O/T)",
    "G": "GRES",
    "H": "TIMESTAMP",
    "l": "TIMELIMIT",
    "m": "MEMORY",
    "n": "HOSTNAMES",
    "N": "NODELIST",
    "o": "NODE_ADDR",
    "P": "PARTITION",
    "R": "PARTITION",
    "t": "STATE",
    "T": "STATE",
    "u": "USER",
}
_SINFO_COUNTS = frozenset("ADFNno")
_SINFO_DEFAULT = "%#P %.5a %.10l %.6D %.6t %N"
_SINFO_NODES = "%#N %.6D %.#P %6t"
_SINFO_SUMMARY = "%#P %.5a %.10l %.16F %N"
_SINFO_REASONS = "%20E %9u %19H %N"


def _node_word(state: str) -> str:
    return state.strip().lower().rstrip("*~#!%$@^-")


def _sinfo_format(text: str) -> tuple[list[SqueueField], list[str], set[str]]:
    """Like squeue's, plus ``%#X`` (width worked out from the data: returned in the set)."""
    fields: list[SqueueField] = []
    errors: list[str] = []
    auto: set[str] = set()
    prefix, _, rest = text.partition("%")
    if prefix:
        fields.append(SqueueField("", suffix=prefix))
    if not rest and "%" not in text:
        return fields, errors, auto
    for piece in ("%" + rest).split("%")[1:]:
        match = re.match(r"^(\.?)(#|\d*)([A-Za-z])", piece)
        if match is None or match.group(3) not in _SINFO_HEADERS:
            bad = piece[:1] if match is None else match.group(3)
            errors.append(f"Invalid node format specification: {bad}")
            literal = "%" + piece
            if fields:
                last = fields[-1]
                fields[-1] = SqueueField(last.code, last.width, last.right, last.suffix + literal)
            else:
                fields.append(SqueueField("", suffix=literal))
            continue
        right, digits, code = match.groups()
        if digits == "#":
            auto.add(code)
            digits = ""
        fields.append(
            SqueueField(code, int(digits) if digits else 0, bool(right), piece[match.end() :])
        )
    return fields, errors, auto


@dataclass(slots=True)
class _SinfoRow:
    partition: PartitionRecord | None
    nodes: list[NodeRecord]


def _sinfo_value(code: str, row: _SinfoRow, tz: dt.tzinfo | None) -> str:
    part = row.partition
    first = row.nodes[0] if row.nodes else None
    words = [_node_word(n.state) for n in row.nodes]
    alloc = sum(1 for w in words if w in ("allocated", "mixed", "completing"))
    idle = sum(1 for w in words if w == "idle")
    other = len(words) - alloc - idle

    def part_name() -> str:
        if part is None:
            return "n/a"
        return part.name + ("*" if part.default else "")

    def limit() -> str:
        if part is None or part.max_time is None:
            return "infinite"
        return _short_time(part.max_time)

    values: dict[str, Callable[[], str]] = {
        "a": lambda: part.state.lower() if part else "n/a",
        "A": lambda: f"{alloc}/{idle}",
        "c": lambda: str(first.cpus) if first else "0",
        "D": lambda: str(len(row.nodes)),
        "E": lambda: (first.reason or "none") if first else "none",
        "f": lambda: ",".join(first.features) if first and first.features else "(null)",
        "F": lambda: f"{alloc}/{idle}/{other}/{len(words)}",
        "G": lambda: f"gpu:{first.gpus}" if first and first.gpus else "(null)",
        "H": lambda: _date(first.reason_time, tz) if first else "Unknown",
        "l": limit,
        "m": lambda: str(first.memory_mb) if first else "0",
        "n": lambda: nodelist(n.name for n in row.nodes),
        "N": lambda: nodelist(n.name for n in row.nodes),
        "o": lambda: nodelist(n.address or n.name for n in row.nodes),
        "P": part_name,
        "R": lambda: part.name if part else "n/a",
        "t": lambda: _NODE_COMPACT.get(words[0], words[0][:5]) if words else "n/a",
        "T": lambda: words[0] if words else "n/a",
        "u": lambda: (first.reason_user or "Unknown") if first else "Unknown",
    }
    getter = values.get(code)
    return getter() if getter else ""


def _group(
    nodes: Iterable[NodeRecord],
    part: PartitionRecord | None,
    codes: Sequence[str],
    tz: dt.tzinfo | None,
) -> list[_SinfoRow]:
    """Nodes alike in every printed column share a row (in order of first appearance)."""
    keyed: dict[tuple[str, ...], _SinfoRow] = {}
    for node in nodes:
        probe = _SinfoRow(part, [node])
        key = tuple(_sinfo_value(c, probe, tz) for c in codes)
        if key not in keyed:
            keyed[key] = _SinfoRow(part, [])
        keyed[key].nodes.append(node)
    return list(keyed.values())


def _state_rank(row: _SinfoRow) -> int:
    return -_NODE_STATE_VALUE.get(_node_word(row.nodes[0].state), 0) if row.nodes else 0


def _sinfo_rows(
    nodes: Sequence[NodeRecord],
    partitions: Sequence[PartitionRecord],
    codes: Sequence[str],
    *,
    node_oriented: bool,
    sort_by_state: bool,
    tz: dt.tzinfo | None,
) -> list[_SinfoRow]:
    by_name = {n.name: n for n in nodes}
    rows: list[_SinfoRow] = []
    for part in partitions:
        if part.nodes:
            members = [by_name[n] for n in part.nodes if n in by_name]
        else:
            members = [n for n in nodes if part.name in n.partitions]
        if node_oriented:
            rows.extend(_SinfoRow(part, [node]) for node in members)
            continue
        part_rows = _group(members, part, codes, tz)
        if sort_by_state:
            part_rows.sort(key=_state_rank)  # stable: ties keep node order
        rows.extend(part_rows)
    if node_oriented:
        rows.sort(key=lambda r: _natural_key(r.nodes[0].name))
    return rows


def render_sinfo(
    nodes: Sequence[NodeRecord],
    partitions: Sequence[PartitionRecord],
    *,
    fmt: str | None = None,
    node_oriented: bool = False,
    summarize: bool = False,
    reasons: bool = False,
    header: bool = True,
    tz: dt.tzinfo | None = None,
) -> tuple[str, list[str]]:
    """sinfo's (stdout, stderr lines). Nodes are grouped as Slurm groups them: per partition,
    those alike in every printed column; ordered as Slurm's default sort (``#P,-t``, or by
    node name with ``-N``)."""
    text = fmt
    if text is None:
        text = _SINFO_DEFAULT
        if node_oriented:
            text = _SINFO_NODES
        if summarize:
            text = _SINFO_SUMMARY
        if reasons:
            text = _SINFO_REASONS
    fields, errors, auto = _sinfo_format(text)
    codes = [f.code for f in fields if f.code and f.code not in _SINFO_COUNTS]
    if summarize and fmt is None:
        codes = [c for c in codes if c not in "tT"]
    if reasons and fmt is None:
        rows = _group([n for n in nodes if n.reason], None, ("E", "u", "H"), tz)
    else:
        rows = _sinfo_rows(
            nodes,
            partitions,
            codes,
            node_oriented=node_oriented,
            sort_by_state=not summarize,
            tz=tz,
        )
    widths = {code: max([9, *(len(_sinfo_value(code, r, tz)) for r in rows)]) for code in auto}
    resolved = [SqueueField(f.code, widths.get(f.code, f.width), f.right, f.suffix) for f in fields]
    lines: list[str] = []
    if header:
        lines.append(_squeue_line(resolved, _SINFO_HEADERS.__getitem__))
    for row in rows:
        lines.append(_squeue_line(resolved, _bind_sinfo(row, tz)))
    return "".join(line + "\n" for line in lines), errors


def _bind_sinfo(row: _SinfoRow, tz: dt.tzinfo | None) -> Callable[[str], str]:
    return lambda code: _sinfo_value(code, row, tz)


# --- scontrol / sbatch -------------------------------------------------------------------------


def render_show_hostnames(text: str) -> str:
    """``scontrol show hostnames LIST``: one name a line (ValueError when malformed)."""
    names = expand_hostlist(text)
    return "".join(name + "\n" for name in names)


def hostlist_ranged(names: Sequence[str]) -> str:
    """Slurm's ``hostlist_ranged_string``: order kept, adjacent same-prefix runs bracketed
    (``n0003,n0001,n0002`` -> ``n[0003,0001-0002]``); duplicates are kept as written."""
    # (prefix, low, high, width): width 0 is an unpadded number (n9, n10 -> n[9-10])
    ranges: list[tuple[str, int, int, int] | str] = []
    for name in names:
        match = re.match(r"^(.*?)(\d+)$", name)
        if match is None:
            ranges.append(name)
            continue
        prefix, digits = match.groups()
        number = int(digits)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        last = ranges[-1] if ranges else None
        if (
            isinstance(last, tuple)
            and last[0] == prefix
            and number == last[2] + 1
            and (width == last[3] or (width == 0 and len(digits) == last[3]))
        ):
            ranges[-1] = (prefix, last[1], number, last[3])
        else:
            ranges.append((prefix, number, number, width))
    parts: list[str] = []
    index = 0
    while index < len(ranges):
        item = ranges[index]
        if isinstance(item, str):
            parts.append(item)
            index += 1
            continue
        group = [item]
        index += 1
        while index < len(ranges):
            nxt = ranges[index]
            if isinstance(nxt, str) or nxt[0] != item[0]:
                break
            group.append(nxt)
            index += 1
        if len(group) == 1 and group[0][1] == group[0][2]:
            prefix, low, _, width = group[0]
            parts.append(f"{prefix}{low:0{width}d}")
            continue
        body = ",".join(
            f"{low:0{width}d}" if low == high else f"{low:0{width}d}-{high:0{width}d}"
            for _, low, high, width in group
        )
        parts.append(f"{item[0]}[{body}]")
    return ",".join(parts)


def render_show_hostlist(text: str) -> str:
    """``scontrol show hostlist n0001,n0002`` -> ``n[0001-0002]\\n``."""
    return hostlist_ranged(expand_hostlist(text)) + "\n"


def render_sbatch_submitted(job_id: int, *, parsable: bool = False) -> str:
    """``Submitted batch job 17169`` (``--parsable``: just the id)."""
    return f"{job_id}\n" if parsable else f"Submitted batch job {job_id}\n"


def _scontrol_tres(job: JobRecord) -> str:
    if job.tres:
        return job.tres
    if job.nodes:
        return f"cpu={job.num_cpus},node={job.num_nodes},billing={job.num_cpus}"
    memory = f"mem={job.memory_mb}M," if job.memory_mb else ""
    return f"cpu={job.num_cpus},{memory}node={job.num_nodes},billing={job.num_cpus}"


def render_scontrol_show_job(job: JobRecord, *, now: float, tz: dt.tzinfo | None = None) -> str:
    """``scontrol show job ID`` for one job (Slurm prints a blank line after each job)."""
    head = f"JobId={job.job_id}"
    if job.het_job_id is not None:
        head += f" HetJobId={job.het_job_id} HetJobOffset={job.het_job_offset}"
    if job.array_job_id is not None and job.array_task is not None:
        head += f" ArrayJobId={job.array_job_id} ArrayTaskId={job.array_task.strip('[]')}"
        if job.array_throttle:
            head += f" ArrayTaskThrottle={job.array_throttle}"
    head += f" JobName={job.name}"
    limit = "UNLIMITED" if job.time_limit is None else _hms(job.time_limit)
    run = _hms(_run_seconds(job, now))
    sched = f" Scheduler={job.scheduler}" if job.scheduler else ""
    nodes = nodelist(job.nodes)
    lines = [
        head,
        *([f"HetJobIdSet={job.het_job_id_set}"] if job.het_job_id is not None else []),
        f"UserId={job.user}({job.uid}) GroupId={job.group}({job.gid}) MCS_label=N/A",
        f"Priority={job.priority} Nice={job.nice} Account={job.account or '(null)'} QOS={job.qos}",
        f"JobState={job.state} Reason={job.reason or 'None'}"
        f" Dependency={job.dependency or '(null)'}",
        f"Requeue={int(job.requeue)} Restarts={job.restarts} BatchFlag=1 Reboot=0"
        f" ExitCode={job.exit_code}:{job.signal}",
        f"RunTime={run} TimeLimit={limit} TimeMin=N/A",
        f"SubmitTime={_date(job.submit, tz)} EligibleTime={_date(job.eligible, tz)}",
        f"AccrueTime={_date(job.accrue, tz)}",
        f"StartTime={_date(job.start, tz)} EndTime={_date(job.end, tz)} Deadline=N/A",
        f"SuspendTime=None SecsPreSuspend=0 LastSchedEval={_date(job.last_sched_eval, tz)}" + sched,
        f"Partition={job.partition} AllocNode:Sid={job.alloc_node}:{job.alloc_sid}",
        "ReqNodeList=(null) ExcNodeList=(null)",
        f"NodeList={nodes}",
    ]
    if job.nodes:
        lines.append(f"BatchHost={job.batch_host or nodelist(job.nodes[:1])}")
    lines += [
        f"NumNodes={_num_nodes(job)} NumCPUs={job.num_cpus} NumTasks={job.num_tasks}"
        f" CPUs/Task={job.cpus_per_task} ReqB:S:C:T=0:0:*:*",
        f"TRES={_scontrol_tres(job)}",
        f"Socks/Node=* NtasksPerN:B:S:C={job.ntasks_per_node}:0:*:* CoreSpec=*",
        f"MinCPUsNode={job.min_cpus_per_node} MinMemoryNode={_megabytes(job.memory_mb)}"
        " MinTmpDiskNode=0",
        "Features=(null) DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if job.exclusive else 'OK'} Contiguous=0 Licenses=(null)"
        " Network=(null)",
        f"Command={job.command or '(null)'}",
        f"WorkDir={job.work_dir}",
        f"StdErr={job.stderr}",
        f"StdIn={job.stdin}",
        f"StdOut={job.stdout}",
        "Power=",
    ]
    if job.gpus_per_node:
        lines.append(f"TresPerNode=gres:gpu:{job.gpus_per_node}")
    if job.gpus_per_task:
        lines.append(f"TresPerTask=gres:gpu:{job.gpus_per_task}")
    text = lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:])
    return text + "   \n\n"


def _megabytes(mb: int) -> str:
    """Memory as scontrol prints it: ``0``, ``512M``, ``1G``, ``2T`` (the largest whole unit)."""
    if not mb:
        return "0"
    if mb % (1 << 20) == 0:
        return f"{mb >> 20}T"
    if mb % 1024 == 0:
        return f"{mb >> 10}G"
    return f"{mb}M"


def _num_nodes(job: JobRecord) -> str:
    if job.max_nodes and not job.nodes:
        return f"{job.num_nodes}-{job.max_nodes}"
    return str(job.num_nodes)
