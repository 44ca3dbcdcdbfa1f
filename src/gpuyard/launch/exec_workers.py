"""The launches of ``gpuyard exec JOB run CMD``: the command once on each node of a held job.

Pure, as the rest of :mod:`gpuyard.launch`. An exec worker runs in the context of the job's own
worker on its node (docs/jobs.md's ``gpuyard exec``: one command on every node): that worker's
environment (the env contract, the mode's variables, the job's ``env``), workspace and working
directory, OS account and resource limits, as :func:`~gpuyard.launch.plan.plan_worker` plans
them; only its argv, its directory (a worker directory of its own, so its log is its own) and
its role differ. It is no primary: its exit decides nothing about the job.

Exec and held-job check workers share the current attempt with the job's own workers, at ranks
from :data:`EXEC_RANK_BASE` on, one run after another (the job's own ranks stay below
:data:`~gpuyard.launch.check.CHECK_RANK_BASE`, its pre-flight checks below this base).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gpuyard.launch.check import check_nodes
from gpuyard.launch.plan import JobContext, plan_worker
from gpuyard.launch.topology import seats
from gpuyard.launch.workspace import control_dir
from gpuyard.models.job import JobSpec, Slot
from gpuyard.models.worker import WorkerKey, WorkerLaunch, WorkerRole

__all__ = [
    "EXEC_RANK_BASE",
    "EXEC_RANK_LIMIT",
    "SHELL_ARGV",
    "exec_launches",
    "exec_ranks",
    "host_ranks",
]

"""An interactive shell (``gpuyard exec JOB shell``): an exec worker on a terminal."""
SHELL_ARGV = ("sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash -i || exec sh -i")
"""What a shell runs: bash where the node has it, else sh; interactive either way."""
EXEC_RANK_BASE = 200_000
"""The first rank of an attempt's exec (and held-job check) workers."""
EXEC_RANK_LIMIT = 300_000
"""Exec ranks stay below this: an attempt runs at most 100,000 of them."""


def host_ranks(spec: JobSpec, placement: Sequence[Slot]) -> dict[str, int]:
    """For each node of the placement, in order, the rank of the job's worker whose context an
    exec worker on that node takes: its first worker there."""
    found: dict[str, int] = {}
    for seat in seats(spec):
        node = placement[seat.rank].node
        found.setdefault(node, seat.rank)
    return {node: found[node] for node in check_nodes(placement)}


def exec_ranks(placement: Sequence[Slot], first: int) -> dict[int, str]:
    """The exec workers of one run from rank ``first``: one per node of the placement, in
    order. ValueError when they would pass :data:`EXEC_RANK_LIMIT`."""
    nodes = check_nodes(placement)
    if first < EXEC_RANK_BASE or first + len(nodes) > EXEC_RANK_LIMIT:
        raise ValueError(
            f"ranks {first}..{first + len(nodes) - 1} are outside the exec ranks "
            f"{EXEC_RANK_BASE}..{EXEC_RANK_LIMIT - 1}"
        )
    return {first + i: node for i, node in enumerate(nodes)}


def exec_launches(
    spec: JobSpec,
    ctx: JobContext,
    *,
    argv: Sequence[str],
    ranks: Mapping[int, str],
    base_env: Mapping[str, Mapping[str, str]],
    role: WorkerRole = WorkerRole.EXEC,
) -> list[WorkerLaunch]:
    """The launch of each exec worker of ``ranks`` (exec rank -> node), running ``argv``.

    ``spec`` is the spec the attempt runs with (:func:`gpuyard.controller.apply.launch_spec`
    for an elastic job); ``base_env`` is the executor's base environment per node."""
    hosts = host_ranks(spec, ctx.placement)
    launches = []
    for rank, node in sorted(ranks.items()):
        if node not in hosts:
            raise ValueError(f"node {node} is not in the job's placement")
        planned = plan_worker(
            spec, ctx, hosts[node], base_env=base_env.get(node, {}), directory_rank=rank
        )
        env = dict(planned.env)
        env["GPUYARD_CONTROL_DIR"] = control_dir(ctx.job_dir, ctx.attempt, rank)
        env["GPUYARD_EXEC_RANK"] = str(rank)
        launches.append(
            dataclasses.replace(
                planned,
                key=WorkerKey(ctx.job_id, ctx.attempt, rank),
                argv=list(argv),
                env=env,
                role=role,
                primary=False,
            )
        )
    return launches
