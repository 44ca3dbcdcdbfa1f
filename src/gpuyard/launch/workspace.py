"""The job-style workspace of docs/distributed.md (任务式训练目录结构), per worker.

::

    workspace/
    ├── algorithm      the code (read-only unless asked otherwise)
    ├── dataset/<name> datasets (read-only unless asked otherwise)
    ├── model/<name>   models (always read-only)
    ├── outputs        where results go: the job's outputs dir, or <outputs>/<job>-<index>
    │                  for sub-task <index> of a batch job
    └── volume/<name>  volumes (writable)

The launch plan says what goes where; the executor makes it so (bind mounts that enforce
read-only where the OS allows, links otherwise).
"""

from __future__ import annotations

import posixpath

from gpuyard.models.job import JobSpec, JobType
from gpuyard.models.worker import Bind

__all__ = ["Bind", "attempt_dir", "control_dir", "output_dir", "worker_dir", "workspace_binds"]


def attempt_dir(job_dir: str, attempt: int) -> str:
    return posixpath.join(job_dir, "attempts", str(attempt))


def worker_dir(job_dir: str, attempt: int, rank: int) -> str:
    """What a worker's job sees of its files (its log, its control dir, its workspace); the same
    layout on every executor. The supervisor's own files (spec, state, exit record) are kept
    out of this tree, where the job is not pointed (docs/runtime.md, "The worker directory")."""
    return posixpath.join(attempt_dir(job_dir, attempt), f"worker-{rank}")


def control_dir(job_dir: str, attempt: int, rank: int) -> str:
    """Where the platform and the job's runtime exchange notices (docs/preemption.md). The
    local executor sets ``GPUYARD_CONTROL_DIR`` to the same path, computed from its job dir."""
    return posixpath.join(worker_dir(job_dir, attempt, rank), "control")


def output_dir(spec: JobSpec, *, job_dir: str, job_name: str, task: int) -> str:
    base = spec.mounts.outputs or posixpath.join(job_dir, "outputs")
    if spec.type is JobType.BATCH:
        return posixpath.join(base, f"{job_name}-{task}")
    return base


def workspace_binds(
    spec: JobSpec, *, workspace: str, outputs: str, task: int, held: frozenset[str] = frozenset()
) -> list[Bind]:
    """The worker's mounts. ``held``: the pool's own dataset directories; a catalogue mount
    of one is marked so (:attr:`Bind.held`), nothing else is, whatever its path."""
    mounts = spec.mounts
    binds = []
    algorithm = mounts.algorithm
    if spec.type is JobType.BATCH and spec.tasks[task].algorithm:
        algorithm = spec.tasks[task].algorithm
    if algorithm:
        binds.append(
            Bind(posixpath.join(workspace, "algorithm"), algorithm, mounts.algorithm_readonly)
        )
    binds += [
        Bind(
            posixpath.join(workspace, "dataset", m.name),
            m.path,
            m.readonly,
            held=m.dataset_version is not None and m.readonly and m.path in held,
        )
        for m in mounts.datasets
    ]
    binds += [
        Bind(posixpath.join(workspace, "model", m.name), m.path, m.readonly) for m in mounts.models
    ]
    binds.append(Bind(posixpath.join(workspace, "outputs"), outputs, False))
    binds += [
        Bind(posixpath.join(workspace, "volume", m.name), m.path, False) for m in mounts.volumes
    ]
    return binds
