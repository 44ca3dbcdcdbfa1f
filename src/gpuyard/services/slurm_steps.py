"""The ``srun`` steps of a Slurm batch job (sacct's step rows, docs/slurm.md).

The steps are not in the store: each ``srun`` records its step in its worker's control
directory, and this reads them back through the executor, for the job's current attempt.
"""

from __future__ import annotations

from sqlalchemy import select

from gpuyard.executors.base import Executor
from gpuyard.models.access import Action
from gpuyard.models.job import JobMode
from gpuyard.models.slurm import SlurmStepView
from gpuyard.services.auth import Policy
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow, WorkerRow

__all__ = ["SlurmStepService"]


class SlurmStepService:
    def __init__(self, store: Store, executor: Executor | None, policy: Policy) -> None:
        self.store = store
        self.executor = executor
        self.policy = policy

    def steps(self, job_id: int, *, actor: str) -> list[SlurmStepView]:
        """The steps of the job's current attempt, by id; empty for a job that is not a Slurm
        batch job, has not started, or runs where this server cannot read."""
        with self.store.read() as session:
            job = self.policy.check_job(
                session, actor, session.get(JobRow, job_id), job_id, Action.VIEW
            )
            spec = job.loaded_spec()
            if spec is None or spec.mode is not JobMode.SLURM:
                return []
            handle = session.scalar(
                select(WorkerRow.handle).where(
                    WorkerRow.job_id == job_id,
                    WorkerRow.attempt == job.attempt,
                    WorkerRow.rank == 0,
                )
            )
        if handle is None or self.executor is None:
            return []
        return [
            SlurmStepView(
                id=s.id,
                name=s.name,
                nodes=list(s.nodes),
                tasks=s.tasks,
                start=s.start,
                end=s.end,
                exit_code=s.exit_code,
            )
            for s in self.executor.slurm_steps(handle)
        ]
