"""The exact file and variable formats of docs/distributed.md (from docs/references.md).

Each function renders one format; ``tests/unit/launch/test_formats.py`` checks them byte for
byte against the reference's own examples.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

__all__ = ["deepspeed_hostfile", "mpich_hostfile", "openmpi_hostfile", "tf_config"]


def openmpi_hostfile(hosts: Sequence[tuple[str, int]]) -> str:
    """``server1 slots=4`` per line (Open MPI, Horovod; slots = GPUs per node, 1 on CPU)."""
    return "".join(f"{host} slots={slots}\n" for host, slots in hosts)


def mpich_hostfile(hosts: Sequence[tuple[str, int]]) -> str:
    """``server1:4`` per line (MPICH's Hydra)."""
    return "".join(f"{host}:{slots}\n" for host, slots in hosts)


def deepspeed_hostfile(hosts: Sequence[tuple[str, int]]) -> str:
    """DeepSpeed reads the Open MPI format (``server1 slots=4``)."""
    return openmpi_hostfile(hosts)


def tf_config(*, workers: Sequence[str], ps: Sequence[str], task_type: str, task_index: int) -> str:
    """TF_CONFIG as the reference writes it.

    Parameter-server jobs list ``ps`` before ``worker``; AllReduce jobs (no parameter servers)
    have only ``worker``. The reference quotes the task index (``"index": "0"``); TensorFlow's
    ``TFConfigClusterResolver`` reads it with ``int()``, so the quoted form works and we keep it.
    """
    cluster = f'"ps": {json.dumps(list(ps))}, ' if ps else ""
    cluster += f'"worker": {json.dumps(list(workers))}'
    task = f'"type": {json.dumps(task_type)}, "index": {json.dumps(str(task_index))}'
    return f'{{ "cluster": {{ {cluster} }}, "task": {{ {task} }}, "environment": "cloud" }}'
