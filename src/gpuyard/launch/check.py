"""The launches of a job's node check: one worker per node of its placement, before its command.

Pure, as the rest of :mod:`gpuyard.launch`. A check worker runs the pool's own tool
(``Tools.check``, :mod:`gpuyard.injob.nodecheck`) with the pool's interpreter in isolated
mode and the executor's base environment: none of the job's environment, command or files, so
nothing of the job can forge the verdict (docs/fault-tolerance.md). It gets the GPUs, CPUs and
memory the job holds on its node, and runs as the job's OS account, inside its limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuyard.models.job import Slot
from gpuyard.models.resources import Resources
from gpuyard.models.worker import Tools, WorkerKey, WorkerLaunch, WorkerRole

__all__ = ["CHECK_RANK_BASE", "CHECK_TIMEOUT", "check_launches", "check_nodes"]

CHECK_RANK_BASE = 100_000
"""Check workers share the attempt of the workers they come before, at ranks from here on (a
job's own ranks stay far below: at most 4096 nodes per task, 256 tasks)."""
CHECK_TIMEOUT = 60.0
"""Seconds the check waits for the job's nodes to meet; the whole check is given twice that."""
CHECK_BURN = 2.0
"""Seconds of compute burn per device."""


def check_nodes(placement: Sequence[Slot]) -> list[str]:
    """The distinct nodes of a placement, in order: one check worker each."""
    return list(dict.fromkeys(slot.node for slot in placement))


def check_launches(
    *,
    job_id: int,
    attempt: int,
    placement: Sequence[Slot],
    tools: Tools,
    base_env: Mapping[str, Mapping[str, str]],
    gpu_devices: Mapping[str, Sequence[str]] | None,
    job_dir: str,
    run_as: str | None,
    timeout: float = CHECK_TIMEOUT,
    burn: float = CHECK_BURN,
    floor: float | None = None,
    rank_base: int = CHECK_RANK_BASE,
) -> list[WorkerLaunch]:
    """One launch per node of ``placement``, at ranks from ``rank_base``; rank 0's node hosts
    the rendezvous on the port of the job's first slot (free until the job's own workers
    start, after the check, and while the job is held: ``gpuyard exec JOB run -t checker``).
    ``floor``: the pool's all-reduce bus bandwidth floor, GB/s."""
    nodes = check_nodes(placement)
    first = placement[0]
    launches = []
    for index, node in enumerate(nodes):
        slots = [s for s in placement if s.node == node]
        gpus = sorted({g for s in slots for g in s.gpus})
        devices = (gpu_devices or {}).get(node)
        visible = [devices[i] if devices and i < len(devices) else str(i) for i in gpus]
        env = dict(base_env.get(node, {}))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible)
        exclusive = any(s.exclusive for s in slots)
        limits = (
            Resources(0, 0, 0)
            if exclusive
            else Resources(
                len(gpus),
                round(sum(s.cpus for s in slots) * 1000),
                sum(s.memory for s in slots),
            )
        )
        argv = [
            tools.python,
            "-I",
            tools.check,
            "--rank",
            str(index),
            "--nodes",
            ",".join(nodes),
            "--store",
            f"{'127.0.0.1' if index == 0 else first.address}:{first.port}",
            "--timeout",
            f"{timeout:g}",
            "--burn",
            f"{burn:g}",
        ]
        if floor:
            argv += ["--floor", f"{floor:g}"]
        launches.append(
            WorkerLaunch(
                key=WorkerKey(job_id, attempt, rank_base + index),
                node=node,
                argv=argv,
                env=env,
                cwd=job_dir,
                grace=5.0,
                role=WorkerRole.CHECK,
                primary=False,
                limits=limits,
                run_as=run_as,
            )
        )
    return launches
