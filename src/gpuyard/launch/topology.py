"""Who the workers of a job are: their roles, ranks and what each needs from its node.

Pure: the members come from :func:`gpuyard.models.request.members`, as the scheduler's do, so
placement and launch agree on the order of workers; this adds each worker's role.

Worker order, which is also placement order: for each (sub-)task of the job, its compute workers
(node rank 0 … nodes-1), then its parameter servers (tensorflow). Roles:

- ``worker``: runs the command; its exit decides the job (a *primary* worker);
- ``launcher``: worker 0 of an mpi/horovod job (runs mpirun) or of a slurm job (runs the
  batch script); primary;
- ``mpi-target``: the other workers of an mpi/horovod/slurm job; they host what the launcher
  starts on their nodes (mpirun's daemons, srun's tasks) and are
  stopped once the launcher has ended (auxiliary);
- ``ps``: a tensorflow parameter server (1 CPU, 1 GiB, no GPU); it serves until the workers have
  ended and is then stopped (auxiliary).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyard.models.job import JobSpec
from gpuyard.models.request import Member, members, request_of
from gpuyard.models.worker import WorkerRole

__all__ = ["Seat", "seats"]


@dataclass(frozen=True, slots=True)
class Seat:
    rank: int
    """Position among all the job's workers (and in its placement)."""
    task: int
    """Sub-task index (0 for a regular job)."""
    node_rank: int
    """Position within its task's gang: compute workers first, then parameter servers."""
    gang_size: int
    """Workers in its task's gang."""
    role: WorkerRole
    role_index: int
    """Index among the workers of its role in its task (a TF task index)."""
    member: Member


def seats(spec: JobSpec) -> tuple[Seat, ...]:
    ask = request_of(spec)
    ps = ask.parameter_servers
    all_members = members(
        tasks=ask.tasks,
        nodes=ask.nodes,
        per_node=ask.per_node,
        parameter_servers=ps,
        node_resources=ask.node_resources,
    )
    gang = spec.nodes + ps
    result = []
    for rank, member in enumerate(all_members):
        task, node_rank = divmod(rank, gang)
        if node_rank >= spec.nodes:
            role, index = WorkerRole.PS, node_rank - spec.nodes
        elif spec.mode.uses_remote_exec:
            role, index = (
                (WorkerRole.LAUNCHER, 0)
                if node_rank == 0
                else (WorkerRole.MPI_TARGET, node_rank - 1)
            )
        else:
            role, index = WorkerRole.WORKER, node_rank
        result.append(Seat(rank, task, node_rank, gang, role, index, member))
    return tuple(result)
