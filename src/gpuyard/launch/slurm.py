"""``SLURM_*`` variables that describe a gpuyard allocation as Slurm would.

Tools that detect Slurm (PyTorch Lightning's ``SLURMEnvironment``, submitit, scripts that read
``SLURM_PROCID``) then agree with the allocation. Each gpuyard worker is one Slurm *task* on its
own node. Where the torch launcher starts several processes per node, the per-process variables
(``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_LOCALID``) are left out: no single value would be
true for every process, and without ``SLURM_NTASKS`` Lightning falls back to the torch launcher's
own variables, which are right.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

__all__ = ["compress_hostlist", "slurm_env"]

_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(hosts: Sequence[str]) -> str:
    """Slurm's hostlist form: ``node[0-3,7],gpu[01-02,10]``. Names that end in a number are
    grouped by their prefix; a zero-padded number keeps its width."""
    return _compress(tuple(hosts))


@functools.lru_cache(maxsize=64)
def _compress(hosts: tuple[str, ...]) -> str:
    # Every worker of a gang gets the same list: worked out once, not once per worker (a
    # 1,000-node gang would cost a second of a launch).
    groups: dict[str, list[tuple[int, int]]] = {}
    order: list[str] = []
    for host in hosts:
        match = _NUMBERED.match(host)
        if match is None:
            order.append(host)
            continue
        prefix, digits = match.groups()
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        if prefix not in groups:
            groups[prefix] = []
            order.append("\0" + prefix)
        groups[prefix].append((int(digits), width))
    parts = []
    for item in order:
        if not item.startswith("\0"):
            parts.append(item)
            continue
        prefix = item[1:]
        numbers = sorted(set(groups[prefix]))
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0][0]:0{numbers[0][1]}d}")
            continue
        ranges: list[list[tuple[int, int]]] = []
        for number in numbers:
            last = ranges[-1][-1] if ranges else None
            if last is not None and number == (last[0] + 1, last[1]):
                ranges[-1].append(number)
            else:
                ranges.append([number])
        text = ",".join(
            f"{r[0][0]:0{r[0][1]}d}"
            if len(r) == 1
            else f"{r[0][0]:0{r[0][1]}d}-{r[-1][0]:0{r[-1][1]}d}"
            for r in ranges
        )
        parts.append(f"{prefix}[{text}]")
    return ",".join(parts)


def slurm_env(
    *,
    job_id: int,
    job_name: str,
    nodes: Sequence[str],
    node_rank: int,
    processes_per_node: int,
    cpus: float,
    gpus: int,
    submit_dir: str,
    attempt: int,
) -> dict[str, str]:
    nodelist = compress_hostlist(nodes)
    env = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_JOB_NAME": job_name,
        "SLURM_CLUSTER_NAME": "gpuyard",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NODEID": str(node_rank),
        "SLURMD_NODENAME": nodes[node_rank],
        "SLURM_CPUS_ON_NODE": str(max(1, int(cpus))),
        "SLURM_GPUS_ON_NODE": str(gpus),
        "SLURM_SUBMIT_DIR": submit_dir,
        "SLURM_RESTART_COUNT": str(attempt),
    }
    if processes_per_node == 1:
        env.update(
            {
                "SLURM_NTASKS": str(len(nodes)),
                "SLURM_NPROCS": str(len(nodes)),
                "SLURM_NTASKS_PER_NODE": "1",
                "SLURM_TASKS_PER_NODE": f"1(x{len(nodes)})" if len(nodes) > 1 else "1",
                "SLURM_PROCID": str(node_rank),
                "SLURM_LOCALID": "0",
                "SLURM_STEP_NUM_TASKS": str(len(nodes)),
                "SLURM_STEP_NUM_NODES": str(len(nodes)),
            }
        )
    return env
