"""Network presets of a pool: the NCCL variables of docs/distributed.md for RoCE and InfiniBand.

The job's own ``env`` wins over a preset, so any of these can be overridden per job.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyard.models.node import Network

__all__ = ["Network", "NetworkPreset", "network_env"]


@dataclass(frozen=True, slots=True)
class NetworkPreset:
    network: Network = Network.NONE
    interface: str = "eth0"
    """The socket interface NCCL (and MPICH's Hydra) should use."""
    large_scale_gpus: int = 1000
    """From this many GPUs in a job on, add the large-scale variables ("thousands of GPUs")."""


def network_env(preset: NetworkPreset, *, total_gpus: int, mpi: bool) -> dict[str, str]:
    if preset.network is Network.NONE:
        return {}
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": preset.interface,
        "NCCL_CROSS_NIC": "0",
    }
    if preset.network is Network.ROCE:
        # InfiniBand pools must not set these two: the reference says they slow IB down.
        env["NCCL_IB_TC"] = "106"
        env["NCCL_IB_GID_INDEX"] = "3"
    if total_gpus >= preset.large_scale_gpus:
        # The reference gives TREE for PyTorch DDP jobs and RING for MPI jobs at this scale.
        env["NCCL_ALGO"] = "RING" if mpi else "TREE"
    return env
