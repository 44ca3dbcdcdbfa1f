"""``SLURM_*`` variables that describe a gpuyard allocation as Slurm would.

Tools that detect Slurm (PyTorch Lightning's ``SLURMEnvironment``, submitit, scripts that read
``SLURM_PROCID``) then agree with the allocation. Each gpuyard worker is one Slurm *task* on its
own node. Where the torch launcher starts several processes per node, the per-process variables
(``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_LOCALID``) are left out: no single value would be
true for every process, and without ``SLURM_NTASKS`` Lightning falls back to the torch launcher's
own variables, which are right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuyard.hostlist import compress_counts, compress_hostlist

if TYPE_CHECKING:  # sbatch's quick path imports this module: it must not load the models
    from gpuyard.models.slurm import SlurmBatch

__all__ = [
    "HET_ONLY",
    "HET_VARIABLES",
    "Component",
    "batch_env",
    "het_env",
    "slurm_components",
    "slurm_env",
    "tasks_per_node",
]


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
                "SLURM_TASKS_PER_NODE": compress_counts([1] * len(nodes)),
                "SLURM_PROCID": str(node_rank),
                "SLURM_LOCALID": "0",
                "SLURM_STEP_NUM_TASKS": str(len(nodes)),
                "SLURM_STEP_NUM_NODES": str(len(nodes)),
            }
        )
    return env


def tasks_per_node(ntasks: int, nodes: int, per_node: int) -> list[int]:
    """How Slurm's block distribution spreads ``ntasks`` over ``nodes``: fill each node up to
    ``per_node``, the last ones get what is left (at least one each while tasks remain)."""
    counts = [0] * nodes
    left = ntasks
    # Every node gets one first (Slurm never allocates a node to a step without a task)...
    for i in range(nodes):
        if left == 0:
            break
        counts[i] = 1
        left -= 1
    # ...then the rest fill the nodes in order up to per_node, then beyond, evenly.
    i = 0
    while left > 0:
        room = max(per_node, -(-ntasks // nodes))
        if counts[i] < room:
            counts[i] += 1
            left -= 1
        i = (i + 1) % nodes
    return counts


def batch_env(
    *,
    job_id: int,
    job_name: str,
    nodes: Sequence[str],
    node_rank: int,
    ntasks: int,
    ntasks_per_node: int,
    cpus_per_task: int | None,
    cpus: float,
    gpus: Sequence[str],
    memory_mb: int,
    submit_dir: str,
    submit_host: str,
    partition: str,
    account: str,
    qos: str,
    user: str,
    uid: int,
    gid: int,
    attempt: int,
    open_mode: str,
    array: Mapping[str, int] | None,
) -> dict[str, str]:
    """The ``SLURM_*`` variables of a Slurm batch job's batch shell (``node_rank`` 0), and of
    what runs on its other nodes, as Slurm 22.05 sets them (recorded in tests/data/slurm)."""
    env = {
        **_job_vars(job_id, job_name, partition, account, qos, user, uid, gid),
        **_node_vars(nodes, node_rank),
        **_task_vars(ntasks, ntasks_per_node, len(nodes)),
        **_node_share_vars(cpus, gpus, len(nodes)),
        **_shell_vars(submit_dir, submit_host, gpus),
    }
    if open_mode == "append":  # truncate is Slurm's default, and then it sets nothing
        env["SLURM_OPEN_MODE"] = "a"
    env.update(_asked_vars(gpus, memory_mb, cpus_per_task, attempt, array))
    return env


def _job_vars(
    job_id: int,
    job_name: str,
    partition: str,
    account: str,
    qos: str,
    user: str,
    uid: int,
    gid: int,
) -> dict[str, str]:
    """What the batch job is and whose."""
    return {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_JOB_NAME": job_name,
        "SLURM_CLUSTER_NAME": "gpuyard",
        "SLURM_JOB_PARTITION": partition,
        "SLURM_JOB_ACCOUNT": account,
        "SLURM_JOB_QOS": qos,
        "SLURM_JOB_USER": user,
        "SLURM_JOB_UID": str(uid),
        "SLURM_JOB_GID": str(gid),
    }


def _node_vars(nodes: Sequence[str], node_rank: int) -> dict[str, str]:
    """The job's nodes, and which of them this is."""
    nodelist = compress_hostlist(nodes)
    return {
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NODEID": str(node_rank),
        "SLURMD_NODENAME": nodes[node_rank],
        "SLURM_TOPOLOGY_ADDR": nodes[node_rank],
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        "SLURM_NODE_ALIASES": "(null)",
    }


def _task_vars(ntasks: int, ntasks_per_node: int, nodes: int) -> dict[str, str]:
    """The job's tasks over its nodes; the batch shell is task 0."""
    counts = tasks_per_node(ntasks, nodes, ntasks_per_node)
    return {
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_NTASKS_PER_NODE": str(ntasks_per_node),
        "SLURM_TASKS_PER_NODE": compress_counts(counts),
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
    }


def _node_share_vars(cpus: float, gpus: Sequence[str], nodes: int) -> dict[str, str]:
    """The CPUs and GPUs the job holds on each node."""
    cpus_on_node = max(1, int(cpus))
    return {
        "SLURM_CPUS_ON_NODE": str(cpus_on_node),
        "SLURM_JOB_CPUS_PER_NODE": compress_counts([cpus_on_node] * nodes),
        "SLURM_GPUS_ON_NODE": str(len(gpus)),
    }


def _shell_vars(submit_dir: str, submit_host: str, gpus: Sequence[str]) -> dict[str, str]:
    """Where it was submitted from, and what the batch shell is."""
    return {
        "SLURM_SUBMIT_DIR": submit_dir,
        "SLURM_SUBMIT_HOST": submit_host,
        "SLURM_PRIO_PROCESS": "0",
        "SLURM_GTIDS": "0",
        "ENVIRONMENT": "BATCH",
        "CUDA_VISIBLE_DEVICES": ",".join(gpus),
    }


def _asked_vars(
    gpus: Sequence[str],
    memory_mb: int,
    cpus_per_task: int | None,
    attempt: int,
    array: Mapping[str, int] | None,
) -> dict[str, str]:
    """What Slurm sets only when the job asked for it (or has it): GPUs, memory, CPUs per
    task, a restart, an array."""
    env: dict[str, str] = {}
    if gpus:
        env["SLURM_JOB_GPUS"] = ",".join(gpus)
        env["GPU_DEVICE_ORDINAL"] = ",".join(gpus)
        env["SLURM_GPUS_PER_NODE"] = str(len(gpus))
    if memory_mb:
        env["SLURM_MEM_PER_NODE"] = str(memory_mb)
    if cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    if attempt > 0:
        env["SLURM_RESTART_COUNT"] = str(attempt)
    if array is not None:
        env.update({f"SLURM_ARRAY_{k.upper()}": str(v) for k, v in array.items()})
    return env


@dataclass(frozen=True, slots=True)
class Component:
    """One component of a Slurm job: a plain job is one, a heterogeneous job several, each
    on its own run of the job's nodes."""

    index: int
    first: int
    """Its first node's position among the job's nodes."""
    nodes: tuple[str, ...]
    job_name: str
    ntasks: int
    ntasks_per_node: int
    cpus_per_task: int | None
    cpus: float
    """CPUs per node."""
    gpus: int
    """GPUs per node."""
    memory_mb: int
    """Memory per node (0: none asked)."""


def slurm_components(
    slurm: SlurmBatch, nodes: Sequence[str], *, gpus: int, cpus: float, memory: int
) -> list[Component]:
    """The job's components over ``nodes`` (the job's, in order); ``gpus``, ``cpus`` and
    ``memory`` (bytes) are each node's share of a plain job."""
    if not slurm.het:
        return [
            Component(
                0,
                0,
                tuple(nodes),
                slurm.job_name,
                slurm.ntasks,
                slurm.ntasks_per_node,
                slurm.cpus_per_task,
                cpus,
                gpus,
                memory >> 20,
            )
        ]
    found, first = [], 0
    for index, c in enumerate(slurm.het):
        found.append(
            Component(
                index,
                first,
                tuple(nodes[first : first + c.nodes]),
                c.job_name,
                c.ntasks,
                c.ntasks_per_node,
                c.cpus_per_task,
                c.cpus,
                c.gpus,
                c.memory >> 20,
            )
        )
        first += c.nodes
    return found


HET_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_QOS",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK",
    "SLURM_MEM_PER_NODE",
    "SLURM_GPUS_PER_NODE",
)
"""The job variables a heterogeneous job's batch shell also gets per component, each with
``_HET_GROUP_<n>`` appended, and again with ``_PACK_GROUP_<n>`` (their old name), as Slurm
22.05 sets them (tests/data/slurm/cases/het_env.json)."""

HET_ONLY = ("SLURM_CPUS_PER_TASK", "SLURM_NTASKS_PER_NODE", "SLURM_GPUS_PER_NODE")
"""Set per component only: a heterogeneous job's batch shell has no plain form of these."""


def het_env(
    *,
    job_id: int,
    components: Sequence[Component],
    partition: str,
    account: str,
    qos: str,
    submit_dir: str,
    submit_host: str,
    user: str,
    uid: int,
    gid: int,
    attempt: int,
) -> dict[str, str]:
    """A heterogeneous job's ``SLURM_HET_SIZE`` and ``*_HET_GROUP_<n>`` variables (its
    components' ids are the leader's plus their index, as Slurm numbers them)."""
    env = {"SLURM_HET_SIZE": str(len(components)), "SLURM_PACK_SIZE": str(len(components))}
    for c in components:
        one = batch_env(
            job_id=job_id + c.index,
            job_name=c.job_name,
            nodes=c.nodes,
            node_rank=0,
            ntasks=c.ntasks,
            ntasks_per_node=c.ntasks_per_node,
            cpus_per_task=c.cpus_per_task,
            cpus=c.cpus,
            gpus=[str(i) for i in range(c.gpus)],
            memory_mb=c.memory_mb,
            submit_dir=submit_dir,
            submit_host=submit_host,
            partition=partition,
            account=account,
            qos=qos,
            user=user,
            uid=uid,
            gid=gid,
            attempt=attempt,
            open_mode="truncate",
            array=None,
        )
        for name in HET_VARIABLES:
            if name in one:
                env[f"{name}_HET_GROUP_{c.index}"] = one[name]
                env[f"{name}_PACK_GROUP_{c.index}"] = one[name]
    return env
