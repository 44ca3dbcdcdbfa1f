"""Who the workers of a job are: their roles, ranks and what each needs from its node.

Pure and shared: the scheduler gets a job's members from here (so placement and launch agree
on the order of workers), and the launch plan gets each worker's role.

Worker order, which is also placement order: for each (sub-)task of the job, its compute workers
(node rank 0 … nodes-1), then its parameter servers (tensorflow). Roles:

- ``worker``: runs the command; its exit decides the job (a *primary* worker);
- ``launcher``: worker 0 of an mpi/horovod job; runs mpirun; primary;
- ``mpi-target``: the other workers of an mpi/horovod job; they host mpirun's daemons and are
  stopped once the launcher has ended (auxiliary);
- ``ps``: a tensorflow parameter server (1 CPU, 1 GiB, no GPU); it serves until the workers have
  ended and is then stopped (auxiliary).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuyard.models.job import JobMode, JobSpec, JobType
from gpuyard.scheduler.snapshot import Member, Request

__all__ = ["PS_MEMBER", "Role", "Seat", "members", "request_of", "seats"]

PS_MEMBER = Member(gpus=0, cpus=1.0, memory=1 << 30)
"""A parameter server's fixed share, as in the reference (1核1G)."""


class Role(StrEnum):
    WORKER = "worker"
    LAUNCHER = "launcher"
    MPI_TARGET = "mpi-target"
    PS = "ps"

    @property
    def primary(self) -> bool:
        """Whether this worker's exit decides the job."""
        return self in (Role.WORKER, Role.LAUNCHER)


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
    role: Role
    role_index: int
    """Index among the workers of its role in its task (a TF task index)."""
    member: Member


def members(
    *, tasks: int, nodes: int, gpus: int, cpus: float, memory: int, parameter_servers: int
) -> tuple[Member, ...]:
    compute = Member(gpus, cpus, memory, whole_node=nodes > 1)
    return ((compute,) * nodes + (PS_MEMBER,) * parameter_servers) * tasks


def seats(spec: JobSpec) -> tuple[Seat, ...]:
    tasks = len(spec.tasks) if spec.type is JobType.BATCH else 1
    ps = spec.parameter_servers if spec.mode is JobMode.TENSORFLOW else 0
    all_members = members(
        tasks=tasks,
        nodes=spec.nodes,
        gpus=spec.resources.gpus,
        cpus=spec.resources.cpus,
        memory=spec.resources.memory,
        parameter_servers=ps,
    )
    gang = spec.nodes + ps
    result = []
    for rank, member in enumerate(all_members):
        task, node_rank = divmod(rank, gang)
        if node_rank >= spec.nodes:
            role, index = Role.PS, node_rank - spec.nodes
        elif spec.mode.uses_mpi:
            role, index = (Role.LAUNCHER, 0) if node_rank == 0 else (Role.MPI_TARGET, node_rank - 1)
        else:
            role, index = Role.WORKER, node_rank
        result.append(Seat(rank, task, node_rank, gang, role, index, member))
    return tuple(result)


def request_of(spec: JobSpec) -> Request:
    return Request(tuple(s.member for s in seats(spec)))
