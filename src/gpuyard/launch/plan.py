"""Build each worker's launch: the env contract, the mode's variables, the argv.

Pure: everything comes in as arguments (the job, its placement, the executor's base env and
paths), nothing is read from the machine. The env contract is documented in
``docs/env-contract.md`` and tested in ``tests/unit/launch``.

Precedence, lowest first: the executor's base env, the platform defaults
(:data:`PLATFORM_DEFAULTS`), the job's ``env``, then the contract
(``GPUYARD_*``, ``CUDA_VISIBLE_DEVICES``), which a job cannot override because the platform's
own bookkeeping depends on it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuyard.executors.base import WorkerKey, WorkerLaunch
from gpuyard.models.command import parse_command
from gpuyard.models.job import JobMode, JobSpec, Slot

__all__ = ["PLATFORM_DEFAULTS", "JobContext", "contract_env", "plan_worker"]

PLATFORM_DEFAULTS = {
    # Logs are files, and a Python writing to a file buffers its output by the block: a
    # training script's prints would reach `gpuyard logs -f` minutes late. A job may set it to
    # "" in its env to get buffering back.
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True, slots=True)
class JobContext:
    """The facts about a job that are not in its spec."""

    job_id: int
    name: str
    attempt: int
    placement: Sequence[Slot]
    job_dir: str
    control_url: str = ""
    gpu_devices: Mapping[str, Sequence[str]] | None = None
    """Per node, what CUDA_VISIBLE_DEVICES names for each local GPU index."""

    @property
    def output_dir(self) -> str:
        return posixpath.join(self.job_dir, "outputs")

    @property
    def checkpoint_dir(self) -> str:
        return posixpath.join(self.job_dir, "checkpoints")


def contract_env(ctx: JobContext, rank: int) -> dict[str, str]:
    """The ``GPUYARD_*`` variables and GPU isolation for worker ``rank``."""
    slot = ctx.placement[rank]
    devices = (ctx.gpu_devices or {}).get(slot.node)
    visible = [devices[i] if devices and i < len(devices) else str(i) for i in slot.gpus]
    env = {
        "GPUYARD_JOB_ID": str(ctx.job_id),
        "GPUYARD_JOB_NAME": ctx.name,
        "GPUYARD_ATTEMPT": str(ctx.attempt),
        "GPUYARD_NODE_RANK": str(rank),
        "GPUYARD_NUM_NODES": str(len(ctx.placement)),
        "GPUYARD_NODE_NAME": slot.node,
        "GPUYARD_NODE_ADDRESS": slot.address,
        "GPUYARD_JOB_DIR": ctx.job_dir,
        "GPUYARD_OUTPUT_DIR": ctx.output_dir,
        "GPUYARD_CHECKPOINT_DIR": ctx.checkpoint_dir,
        "GPUYARD_GPUS": str(len(slot.gpus)),
        # An empty list hides every GPU from a job that asked for none.
        "CUDA_VISIBLE_DEVICES": ",".join(visible),
    }
    if ctx.control_url:
        env["GPUYARD_URL"] = ctx.control_url
    return env


def plan_worker(
    spec: JobSpec,
    ctx: JobContext,
    rank: int,
    *,
    base_env: Mapping[str, str],
) -> WorkerLaunch:
    """The launch of worker ``rank`` of a job."""
    if spec.mode is not JobMode.SINGLE:  # pragma: no cover - the enum has only SINGLE today
        raise NotImplementedError(f"mode {spec.mode} is not implemented")
    env = dict(base_env)
    env.update(PLATFORM_DEFAULTS)
    env.update(spec.env)
    env.update(contract_env(ctx, rank))
    argv = parse_command(spec.command).render(env)
    return WorkerLaunch(
        key=WorkerKey(ctx.job_id, ctx.attempt, rank),
        node=ctx.placement[rank].node,
        argv=argv,
        env=env,
        cwd=spec.workdir or ctx.job_dir,
        grace=spec.graceful_shutdown,
    )
