"""``squeue --json`` and ``sacct --json``: Slurm 22.05's ``openapi/v0.0.38`` documents.

The documents are built from the same records the tables are (``gpuyard.slurm.records``), key
for key in Slurm's order, and written with Slurm's own JSON layout (two-space indent, ``\\/``,
empty lists on two lines, no final newline) so that they compare byte for byte where the facts
agree. Slurm's quirks of that version are kept, because clients parse them: ``job_state`` is a
string (torchx's newer ``job_state[0]`` reads a list, as Slurm 23.02+ prints), ``array_job_id``
is 0 outside arrays, unset numbers are ``null``, a pending job has no ``job_resources``, and
``--json`` lists every job whatever ``-j`` says.

Some values describe the Slurm installation rather than the job (its cluster name, the
association ids of its accounting database, the socket/core layout of its nodes, which GPU
indices a job got, its scheduler's internal flags). gpuyard writes its own values there, of
the same types; ``tests/unit/slurm/test_openapi.py`` lists them and compares everything else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from gpuyard.models.slurm import SlurmState
from gpuyard.slurm.records import JobRecord, StepRecord
from gpuyard.slurm.render import nodelist

__all__ = ["CLUSTER", "dumps", "sacct_document", "squeue_document"]

CLUSTER = "gpuyard"
"""The cluster name the documents show (Slurm's ``ClusterName``)."""

_META = {
    "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
}
_YEAR = 365 * 86400
"""A running job with no limit ends, as far as squeue says, a year after it started."""


# --- Slurm's JSON layout ------------------------------------------------------------------


def dumps(value: Any) -> str:
    """``value`` as Slurm 22.05's serializer writes it."""
    out: list[str] = []
    _write(value, 0, out)
    return "".join(out)


def _write(value: Any, depth: int, out: list[str]) -> None:
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        if not value:
            out.append("{\n" + "  " * depth + "}")
            return
        out.append("{\n")
        for index, (key, item) in enumerate(value.items()):
            out.append(f"{pad}{_string(str(key))}: ")
            _write(item, depth + 1, out)
            out.append(",\n" if index < len(value) - 1 else "\n")
        out.append("  " * depth + "}")
    elif isinstance(value, list | tuple):
        out.append("[\n")
        for index, item in enumerate(value):
            out.append(pad)
            _write(item, depth + 1, out)
            out.append(",\n" if index < len(value) - 1 else "\n")
        out.append("  " * depth + "]")
    elif value is None:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(repr(value) if math.isfinite(value) else "null")
    else:
        out.append(_string(str(value)))


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("/", "\\/")


# --- common values ------------------------------------------------------------------------


def _epoch(value: float | None) -> int:
    if value is None or not math.isfinite(value) or value < 0:
        return 0
    return int(min(value, 2**63 - 1))


def _minutes(limit: float | None) -> int | None:
    if limit is None or not math.isfinite(limit):
        return None
    return int(min(limit, 2**62) // 60)


def _wait_status(code: int, signal: int) -> int:
    """Slurm's raw exit field: ``code << 8 | signal`` (what ``ExitCode=3:0`` is made of)."""
    return (max(code, 0) & 0xFF) << 8 | (signal & 0x7F)


def _allocated(job: JobRecord) -> bool:
    return bool(job.nodes) and job.start is not None


def _array(job: JobRecord) -> tuple[int, int | None, str]:
    """(array_job_id, array_task_id, array_task_string): 0/null/"" outside an array; the
    pending remainder ``[2-9%2]`` shows its indices as a string."""
    if job.array_job_id is None:
        return 0, None, ""
    task = job.array_task or ""
    if task.isdigit():
        return job.array_job_id, int(task), ""
    return job.array_job_id, None, task.strip("[]")


def _tres_alloc(job: JobRecord) -> str:
    if not _allocated(job):
        return ""
    nodes = max(job.num_nodes, len(job.nodes))
    return f"cpu={job.num_cpus},node={nodes},billing={job.num_cpus}"


def _tres_req(job: JobRecord) -> str:
    if job.tres and "mem=" in job.tres:
        return job.tres
    nodes = max(job.num_nodes, 1)
    mem = f"mem={job.memory_mb * nodes}M," if job.memory_mb else ""
    return f"cpu={job.num_cpus},{mem}node={nodes},billing={job.num_cpus}"


# --- squeue --json ------------------------------------------------------------------------


def squeue_document(jobs: Iterable[JobRecord], *, cluster: str = CLUSTER) -> dict[str, Any]:
    """The whole ``squeue --json`` document for these jobs (in the order given)."""
    return {"meta": _META, "errors": [], "jobs": [squeue_job(j, cluster=cluster) for j in jobs]}


def _job_resources(job: JobRecord) -> dict[str, Any]:
    per_node = max(job.num_cpus // max(len(job.nodes), 1), 1)
    srun_tasks = any(s.name.isdigit() and s.state == SlurmState.RUNNING for s in job.steps)
    return {
        "nodes": nodelist(job.nodes),
        # 22.05 counts a whole node given to --exclusive as one core a node
        "allocated_cores": job.num_cpus if not job.exclusive else len(job.nodes),
        "allocated_hosts": len(job.nodes),
        "allocated_nodes": [
            {
                "sockets": _sockets(per_node),
                "nodename": node,
                "cpus_used": per_node if srun_tasks else 0,
                "memory_used": 0,
                "memory_allocated": 0,
            }
            for node in job.nodes
        ],
    }


def _sockets(cpus: int) -> dict[str, Any]:
    """The node's cores as 22.05 lays them out over two sockets (gpuyard has no sockets)."""
    first = (cpus + 1) // 2
    layout = {"0": {"cores": {str(c): "allocated" for c in range(first)}}}
    if cpus > first:
        layout["1"] = {"cores": {str(c): "allocated" for c in range(cpus - first)}}
    return layout


def _state_reason(job: JobRecord) -> str:
    if job.state == SlurmState.FAILED:
        return "NonZeroExitCode"
    if job.state == SlurmState.TIMEOUT:
        return "TimeLimit"
    return job.reason if job.state == SlurmState.PENDING else "None"


def _end_time(job: JobRecord) -> int:
    if job.end is not None:
        return _epoch(job.end)
    if job.start is None:
        return 0
    limit = job.time_limit if job.time_limit is not None else _YEAR
    return _epoch(job.start + limit)


def _flags(job: JobRecord) -> list[str]:
    if job.state in (SlurmState.RUNNING, SlurmState.SUSPENDED, SlurmState.COMPLETING):
        return ["JOB_WAS_RUNNING"]
    if job.state in {SlurmState.PENDING, SlurmState.TIMEOUT}:
        return []
    return ["TRES_STR_CALC"]


def squeue_job(job: JobRecord, *, cluster: str = CLUSTER) -> dict[str, Any]:
    """One entry of ``jobs``, key for key as 22.05 prints it."""
    out = _squeue_identity(job, cluster)
    if _allocated(job):
        out["job_resources"] = _job_resources(job)
    return out | _squeue_sizes(job) | _squeue_settings(job)


def _squeue_identity(job: JobRecord, cluster: str) -> dict[str, Any]:
    """``squeue_job``'s keys from ``account`` to ``job_id``, in Slurm's order."""
    array_job, array_task, array_string = _array(job)
    pending = job.state == SlurmState.PENDING
    raw_exit = _wait_status(job.exit_code, job.signal)
    return {
        "account": job.account,
        "accrue_time": _epoch(job.accrue),
        "admin_comment": "",
        "array_job_id": array_job,
        "array_task_id": array_task,
        "array_max_tasks": job.array_throttle,
        "array_task_string": array_string,
        "association_id": 0,
        "batch_features": "",
        "batch_flag": job.batch,
        "batch_host": job.batch_host or (job.nodes[0] if _allocated(job) else ""),
        "flags": _flags(job),
        "burst_buffer": "",
        "burst_buffer_state": "",
        "cluster": cluster,
        "cluster_features": "",
        "command": job.command,
        "comment": job.comment,
        "container": "",
        "contiguous": False,
        "core_spec": None,
        "thread_spec": None,
        "cores_per_socket": None,
        "billable_tres": None if pending else float(job.num_cpus),
        "cpus_per_task": None,
        "cpu_frequency_minimum": None,
        "cpu_frequency_maximum": None,
        "cpu_frequency_governor": None,
        "cpus_per_tres": "",
        "deadline": 0,
        "delay_boot": 0,
        "dependency": job.dependency,
        "derived_exit_code": raw_exit
        if job.state in (SlurmState.FAILED, SlurmState.CANCELLED)
        else 0,
        "eligible_time": _epoch(job.eligible),
        "end_time": _end_time(job),
        "excluded_nodes": "",
        "exit_code": raw_exit,
        "features": "",
        "federation_origin": "",
        "federation_siblings_active": "",
        "federation_siblings_viable": "",
        "gres_detail": [
            f"gpu:{job.gpus_per_node}(IDX:0-{job.gpus_per_node - 1})"
            for _ in job.nodes
            if job.gpus_per_node and not pending and job.state == SlurmState.RUNNING
        ],
        "group_id": job.gid,
        "group_name": job.group,
        "job_id": job.job_id,
    }


def _squeue_sizes(job: JobRecord) -> dict[str, Any]:
    """``squeue_job``'s keys from ``job_state`` to ``priority``, in Slurm's order."""
    return {
        "job_state": job.state,
        "last_sched_evaluation": _epoch(job.last_sched_eval),
        "licenses": "",
        "max_cpus": 0,
        "max_nodes": job.max_nodes,
        "mcs_label": "",
        "memory_per_tres": "",
        "name": job.name,
        "nodes": nodelist(job.nodes),
        "nice": None,
        "tasks_per_core": None,
        "tasks_per_node": job.ntasks_per_node,
        "tasks_per_socket": None,
        "tasks_per_board": 0,
        "cpus": job.num_cpus,
        "node_count": max(job.num_nodes, len(job.nodes)),
        "tasks": job.num_tasks,
        "het_job_id": job.het_job_id or 0,
        "het_job_id_set": job.het_job_id_set,
        "het_job_offset": job.het_job_offset,
        "partition": job.partition,
        "prefer": "",
        "memory_per_node": job.memory_mb or None,
        "memory_per_cpu": None,
        "minimum_cpus_per_node": job.min_cpus_per_node,
        "minimum_tmp_disk_per_node": 0,
        "preempt_time": 0,
        "pre_sus_time": 0,
        "priority": job.priority,
    }


def _squeue_settings(job: JobRecord) -> dict[str, Any]:
    """``squeue_job``'s keys from ``profile`` to the end, in Slurm's order."""
    gpus = f"gres:gpu:{job.gpus_per_node}" if job.gpus_per_node else ""
    return {
        "profile": None,
        "qos": job.qos,
        "reboot": False,
        "required_nodes": "",
        "requeue": job.requeue,
        "resize_time": 0,
        "restart_cnt": job.restarts,
        "resv_name": "",
        "shared": "none" if job.exclusive else None,
        "show_flags": ["SHOW_ALL", "SHOW_DETAIL", "SHOW_LOCAL"],
        "sockets_per_board": 0,
        "sockets_per_node": None,
        "start_time": _epoch(job.start),
        "state_description": "",
        "state_reason": _state_reason(job),
        "standard_error": "",
        "standard_input": job.stdin if job.batch else "",
        "standard_output": "",
        "submit_time": _epoch(job.submit),
        "suspend_time": 0,
        "system_comment": "",
        "time_limit": _minutes(job.time_limit),
        "time_minimum": 0,
        "threads_per_core": None,
        "tres_bind": "",
        "tres_freq": "",
        "tres_per_job": "",
        "tres_per_node": gpus,
        "tres_per_socket": "",
        "tres_per_task": f"gres:gpu:{job.gpus_per_task}" if job.gpus_per_task else "",
        "tres_req_str": _tres_req(job),
        "tres_alloc_str": _tres_alloc(job),
        "user_id": job.uid,
        "user_name": job.user,
        "wckey": "",
        "current_working_directory": job.work_dir,
    }


# --- sacct --json -------------------------------------------------------------------------


_DB_META = {
    "plugin": {"type": "openapi/dbv0.0.38", "name": "Slurm OpenAPI DB v0.0.38"},
    "Slurm": _META["Slurm"],
}


def sacct_document(
    jobs: Sequence[JobRecord], *, now: float, cluster: str = CLUSTER
) -> dict[str, Any]:
    """The whole ``sacct --json`` document (jobs in the order given, their steps inside)."""
    return {
        "meta": _DB_META,
        "errors": [],
        "jobs": [sacct_job(j, now=now, cluster=cluster) for j in jobs],
    }


_ZERO_TIME = {"seconds": 0, "microseconds": 0}


def _exit(code: int, signal: int) -> dict[str, Any]:
    if signal:
        name = _SIGNAL_NAMES.get(signal, f"Signal {signal}")
        return {
            "status": "SIGNALED",
            "return_code": None,
            "signal": {"signal_id": signal, "name": name},
        }
    if code < 0:
        return {"status": "PENDING", "return_code": None}
    return {"status": "FAILED" if code else "SUCCESS", "return_code": code}


_SIGNAL_NAMES = {
    1: "Hangup",
    2: "Interrupt",
    6: "Aborted",
    9: "Killed",
    10: "User defined signal 1",
    12: "User defined signal 2",
    15: "Terminated",
}


def _tres(kinds: Sequence[tuple[str, int, int | None]]) -> list[dict[str, Any]]:
    return [{"type": t, "name": None, "id": i, "count": c} for t, i, c in kinds]


def _elapsed(start: float | None, end: float | None, now: float) -> int:
    if start is None:
        return 0
    return max(_epoch(end if end is not None else now) - _epoch(start), 0)


def _array_bitmap(task: str) -> str:
    """A pending remainder's indices (``[2-9%2]``) as 22.05's hex bitmap (``0x3FC``)."""
    bits = 0
    for part in task.strip("[]").split("%", 1)[0].split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            for index in range(int(low), int(high or low) + 1):
                bits |= 1 << min(index, 4096)
    return f"0x{bits:X}"


def sacct_job(job: JobRecord, *, now: float, cluster: str = CLUSTER) -> dict[str, Any]:
    """One entry of ``sacct --json``'s ``jobs``, key for key as 22.05 prints it."""
    allocated = _allocated(job)
    nodes = max(job.num_nodes, len(job.nodes))
    array_job, array_task, array_string = _array(job)
    cpus = job.num_cpus
    return {
        "account": job.account,
        "comment": {"administrator": None, "job": job.comment or None, "system": None},
        "allocation_nodes": len(job.nodes) if allocated else 0,
        "array": {
            "job_id": array_job,
            "limits": {"max": {"running": {"tasks": _throttle(job) if array_string else 0}}},
            "task": _array_bitmap(array_string) if array_string else None,
            "task_id": array_task,
        },
        "association": {
            "account": job.account,
            "cluster": cluster,
            "partition": None,
            "user": job.user,
        },
        "cluster": cluster,
        "constraints": "",
        "container": None,
        "derived_exit_code": _exit(job.exit_code, job.signal),
        "time": {
            "elapsed": _elapsed(job.start, job.end, now),
            "eligible": None if array_string else _epoch(job.eligible),
            "end": _epoch(job.end),
            "start": _epoch(job.start),
            "submission": _epoch(job.submit),
            "suspended": 0,
            "system": dict(_ZERO_TIME),
            "limit": _minutes(job.time_limit),
            "total": dict(_ZERO_TIME),
            "user": dict(_ZERO_TIME),
        },
        "exit_code": _exit(job.exit_code, job.signal),
        "flags": ["CLEAR_SCHEDULING", "STARTED_ON_SCHEDULE"] if allocated else [],
        "group": job.group,
        "het": {
            "job_id": job.het_job_id or 0,
            "job_offset": job.het_job_offset if job.het_job_id is not None else None,
        },
        "job_id": job.job_id,
        "name": job.name,
        "mcs": {"label": ""},
        "nodes": nodelist(job.nodes) if allocated else "None assigned",
        "partition": job.partition,
        "priority": job.priority,
        "qos": job.qos,
        # --exclusive asked for one cpu a node; it was given the whole node
        "required": {
            "CPUs": job.min_cpus_per_node * nodes if job.exclusive else cpus,
            "memory": job.memory_mb,
        },
        "kill_request_user": job.user if job.state == SlurmState.CANCELLED else None,
        "reservation": {"id": 0, "name": 0},
        "state": {"current": job.state, "reason": job.reason},
        "steps": [_step(job, step, now) for step in job.steps],
        "tres": {
            "allocated": _tres(
                [("cpu", 1, cpus), ("energy", 3, None), ("node", 4, nodes), ("billing", 5, cpus)]
            )
            if allocated
            else [],
            "requested": _tres(_requested(job)),
        },
        "user": job.user,
        "wckey": {"wckey": "", "flags": []},
        "working_directory": job.work_dir,
    }


def _requested(job: JobRecord) -> list[tuple[str, int, int | None]]:
    nodes = max(job.num_nodes, 1)
    cpus = job.min_cpus_per_node * nodes if job.exclusive else job.num_cpus
    return [
        ("cpu", 1, cpus),
        ("mem", 2, job.memory_mb * nodes),
        ("node", 4, nodes),
        ("billing", 5, cpus),
    ]


def _throttle(job: JobRecord) -> int:
    """``%2`` of an array: from the record, or from its pending remainder ``[2-9%2]``."""
    if job.array_throttle:
        return job.array_throttle
    _, _, text = (job.array_task or "").strip("[]").partition("%")
    return int(text) if text.isdigit() else 0


def _step(job: JobRecord, step: StepRecord, now: float) -> dict[str, Any]:
    srun = step.name not in ("batch", "extern")
    per_node = max(job.num_cpus // max(len(job.nodes), 1), 1)
    cpus = step.cpus if srun else (per_node if step.name == "batch" else job.num_cpus)
    count = len(step.nodes)
    if step.name == "extern":
        allocated = [
            ("cpu", 1, cpus),
            ("energy", 3, None),
            ("node", 4, count),
            ("billing", 5, cpus),
        ]
    else:
        allocated = [("cpu", 1, cpus), ("mem", 2, 0), ("node", 4, count)]
    empty: dict[str, list[Any]] = {"max": [], "min": [], "average": [], "total": []}
    return {
        "nodes": {"list": list(step.nodes), "count": count, "range": nodelist(step.nodes)},
        "tres": {
            "requested": {k: list(v) for k, v in empty.items()},
            "consumed": {k: list(v) for k, v in empty.items()},
            "allocated": _tres(allocated),
        },
        "time": {
            "elapsed": _elapsed(step.start, step.end, now),
            "end": _epoch(step.end),
            "start": _epoch(step.start),
            "suspended": 0,
            "system": dict(_ZERO_TIME),
            "total": dict(_ZERO_TIME),
            "user": dict(_ZERO_TIME),
        },
        "exit_code": _exit(step.exit_code, step.signal),
        "tasks": {"count": step.tasks},
        "pid": None,
        "CPU": {
            "requested_frequency": {"min": None, "max": None} if srun else {"min": 0, "max": 0},
            "governor": list(_GOVERNORS) if srun else [],
        },
        "kill_request_user": None,
        "state": step.state,
        "statistics": {"CPU": {"actual_frequency": 0}, "energy": {"consumed": 0}},
        "step": {
            "job_id": job.job_id,
            "het": {"component": None},
            "id": int(step.name) if step.name.isdigit() else step.name,
            "name": step.job_name or step.name,
        },
        "task": {
            "distribution": "Unknown"
            if not srun
            else ("Block" if step.tasks > max(count, 1) else "Cyclic")
        },
    }


_GOVERNORS = ("Conservative", "Performance", "PowerSave", "OnDemand", "UserSpace")
