"""Agreeing on a preemption notice across the ranks of a ``torch.distributed`` job.

The notice reaches ranks at different moments (each worker has its own control dir, each
process its own signal and its own look at the flag file), so a rank that stopped on its own
would leave the others blocked in their next collective. `preemption_agreed` is one small
all-reduce (MAX over a one-element tensor): if any rank has the notice, every rank learns it at
the same step, and they all save and stop after that step.

It is a **collective**: every rank of the group must call it at the same point of every step it
is called for (the same step numbers on every rank), or the job hangs. To poll less often,
call it every N steps on every rank (``if step % N == 0 and preemption_agreed(): …``).

Importing this module imports torch; ``import gpuyard.runtime`` does not.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from gpuyard.runtime.process import Runtime, current

__all__ = ["preemption_agreed"]

# One flag tensor per (group, device), reused every step: no allocation on the hot path.
_flags: dict[tuple[int, str], torch.Tensor] = {}


def preemption_agreed(
    *, group: dist.ProcessGroup | None = None, runtime: Runtime | None = None
) -> bool:
    """Whether any rank of `group` (default: the whole job) has a preemption notice.

    Every rank gets the same answer. A rank that learns of the notice only from a peer then
    also answers True from `gpuyard.runtime.preemption_requested` (its notice's source is
    ``"peer"``). Without an initialised process group this is the local flag.

    The flag travels on the CPU for a backend that has a CPU transport (gloo, mpi, or a mixed
    ``cpu:gloo,cuda:nccl`` group) and on the current CUDA device for NCCL alone; the CUDA case
    waits for the device, which costs little next to a training step but is one more reason to
    call it every N steps when steps are very short.
    """
    rt = runtime or current()
    local = rt.preemption_requested()
    if not (dist.is_available() and dist.is_initialized()):
        return local
    flag = _flag(group)
    flag.fill_(1 if local else 0)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    agreed = bool(flag.item())
    if agreed and not local:
        rt.record_peer_notice()
    return agreed


def _flag(group: dist.ProcessGroup | None) -> torch.Tensor:
    device = _device(str(dist.get_backend(group)))
    key = (id(group), str(device))
    flag = _flags.get(key)
    if flag is None:
        flag = _flags[key] = torch.zeros(1, dtype=torch.int32, device=device)
    return flag


def _device(backend: str) -> torch.device:
    """CPU when the backend can carry CPU tensors; else the current CUDA device (NCCL)."""
    names = {part.rpartition(":")[2].strip() for part in backend.lower().split(",")}
    if names & {"gloo", "mpi", "ucc"} or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())
