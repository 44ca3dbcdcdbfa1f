"""``squeue --json`` / ``sacct --json`` against documents recorded from a real Slurm 22.05.8.

Each recorded document is rebuilt from its case's facts and compared key for key (same keys,
same order, same JSON types) and value for value. The only values not compared are those
that describe the Slurm installation rather than the job (``HOST_SPECIFIC`` says which and
why); everything torchx reads is compared exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from slurm_cases import jobs_of

from gpuyard.slurm import openapi
from gpuyard.slurm.records import JobRecord

CASES = Path(__file__).resolve().parents[2] / "data" / "slurm" / "cases"
JSON_CASES = [
    case
    for case in (json.loads(p.read_text()) for p in sorted(CASES.glob("*.json")))
    if "--json" in case.get("argv", ())
]


# Values that depend on the Slurm installation (or on bookkeeping gpuyard has no part of);
# their presence and JSON type are still compared.
HOST_SPECIFIC = {
    "cluster": "ClusterName of the recording's slurm.conf (gpuyard: 'gpuyard')",
    "association_id": "a row id in the recording's accounting database",
    "flags": "slurmctld's internal bits (JOB_WAS_RUNNING, TRES_STR_CALC)",
    "gres_detail": "which GPU indices the node's gres plugin handed out",
    "sockets": "the recording nodes' 2-socket layout, and which of their cores were free "
    "(gpuyard nodes have no sockets): the cores a job holds on a node are compared",
    "allocated_cores": "22.05 counts a whole-node allocation as 1 core",
    "cpus_used": "slurmd's live count of cpus used by steps",
    "tres_req_str": "the request's memory is the node's RealMemory of the recording",
    "standard_output": "22.05 prints the unexpanded --output pattern",
    "standard_error": "22.05 prints the unexpanded --error pattern",
    "derived_exit_code": "the highest exit of the steps, which the facts do not hold",
    "association": "accounting database ids",
    "requested": "the request's memory is the node's RealMemory of the recording",
    "status": "22.05.8's sacct --json reports SUCCESS for an exit that was not a signal",
    "CPUs": "sacct's facts do not say the job was --exclusive (it asked for 1 cpu, got 64)",
    "return_code": "22.05.8's sacct --json reports 0 for an exit that was not a signal",
}


def _compare(mine: Any, real: Any, path: str, problems: list[str]) -> None:
    key = path.rsplit(".", 1)[-1]
    if type(mine) is not type(real):
        problems.append(f"{path}: type {type(mine).__name__} != {type(real).__name__}")
        return
    if key == "sockets" and isinstance(real, dict) and isinstance(mine, dict):
        # Which socket's cores were free on a shared node is the recording's; how many cores
        # the job holds on the node is not.
        cores = [sum(len(s.get("cores", {})) for s in x.values()) for x in (mine, real)]
        if cores[0] != cores[1]:
            problems.append(f"{path}: {cores[0]} cores != {cores[1]}")
        return
    if isinstance(real, dict):
        if list(mine) != list(real):
            problems.append(f"{path}: keys {list(mine)} != {list(real)}")
            return
        if key in HOST_SPECIFIC:
            return
        for k in real:
            _compare(mine[k], real[k], f"{path}.{k}", problems)
    elif isinstance(real, list):
        if key in HOST_SPECIFIC:
            return
        if len(mine) != len(real):
            problems.append(f"{path}: {len(mine)} items != {len(real)}")
            return
        for i, (a, b) in enumerate(zip(mine, real, strict=True)):
            _compare(a, b, f"{path}[{i}]", problems)
    elif mine != real and key not in HOST_SPECIFIC:
        problems.append(f"{path}: {mine!r} != {real!r}")


def _document(case: dict[str, Any]) -> dict[str, Any]:
    jobs: list[JobRecord] = jobs_of(case)
    if case["kind"] == "squeue":
        return openapi.squeue_document(jobs)
    real = json.loads(case["stdout"])["jobs"]
    by_id = {j.job_id: j for j in jobs}
    # sacct lists in its database's order and keeps a requeued job's earlier attempt (the
    # facts hold the last one): the same jobs, in the document's order, are rebuilt
    listed = [by_id[j["job_id"]] for j in real if j["state"]["current"] != "REQUEUED"]
    return openapi.sacct_document(listed, now=case["now"])


@pytest.mark.parametrize("case", JSON_CASES, ids=[c["name"] for c in JSON_CASES])
def test_recorded_document(case: dict[str, Any]) -> None:
    real = json.loads(case["stdout"])
    real["jobs"] = [j for j in real["jobs"] if j.get("state", {}).get("current") != "REQUEUED"]
    problems: list[str] = []
    _compare(_document(case), real, "$", problems)
    assert problems == []


@pytest.mark.parametrize("case", JSON_CASES, ids=[c["name"] for c in JSON_CASES])
def test_slurm_json_layout(case: dict[str, Any]) -> None:
    """Our serializer writes the recorded bytes back from the parsed document."""
    assert openapi.dumps(json.loads(case["stdout"])) == case["stdout"]


# What torchx's slurm scheduler reads (torchx/schedulers/slurm_scheduler.py: _describe_squeue,
# _list_squeue, _list_sacct): never left out of the comparison.
TORCHX_READS = {
    "job_id",
    "name",
    "job_state",
    "state",
    "current",
    "command",
    "current_working_directory",
    "job_resources",
    "allocated_nodes",
    "nodename",
    "memory_allocated",
    "nodes",
    "het_job_id",
    "array_job_id",
    "array_task_id",
}


def test_torchx_fields_are_compared() -> None:
    assert not TORCHX_READS & HOST_SPECIFIC.keys()


def test_json_cases_recorded() -> None:
    kinds = {c["kind"] for c in JSON_CASES}
    assert kinds == {"squeue", "sacct"}
    torchx = [c for c in JSON_CASES if c["argv"][1:] == ["-S1970-01-01-00:00:01", "--json"]]
    assert torchx, "torchx's list call is recorded"
