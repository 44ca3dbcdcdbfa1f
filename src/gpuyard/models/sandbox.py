"""What a worker's sandbox holds: its default memory limit, the GPU device files it may not
open, the directories it gets a private copy of (docs/security.md, "What is protected").

Pure rules over values; the local executor applies them (a mount namespace per worker made by
its supervisor, :mod:`gpuyard.executors.local.sandbox`, and the devices cgroup on v1).

- **Memory.** A job that names no ``memory`` gets the pool's default: a share of its node's
  memory (``50%``) or a size (``16G``); ``0`` for none.
- **GPU devices.** Each GPU ``i`` of the machine has a device file (``/dev/nvidia{index}``);
  a worker may open only those of the GPUs it was given, and the files every GPU job needs
  (``/dev/nvidiactl``, ``/dev/nvidia-uvm``…) only if it was given one. The rest are hidden.
- **Private directories.** ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are an empty tmpfs of the
  worker's own; the pool's paths that lie below them (its home, the job's working directory)
  are mounted back at the same place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuyard.quantities import parse_bytes

__all__ = [
    "DEFAULT_GPU_DEVICE_FILES",
    "DEFAULT_GPU_SHARED_FILES",
    "PRIVATE_DIRS",
    "hidden_gpu_files",
    "kept_paths",
    "memory_default",
    "parse_memory_default",
    "renumbered_devices",
]

DEFAULT_GPU_DEVICE_FILES = "/dev/nvidia{index}"
"""The device file of the machine's GPU ``index`` (NVIDIA's minor number ``index``)."""
DEFAULT_GPU_SHARED_FILES: tuple[str, ...] = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
"""Device files every GPU job needs and a job without a GPU has no use for."""
PRIVATE_DIRS: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")  # noqa: S108 - made private


def parse_memory_default(text: str) -> str:
    """``50%`` (of the node's memory, 1–100), a size (``16G``) or ``0``; normalised. Raises
    ValueError with what to write instead."""
    value = text.strip()
    if value.endswith("%"):
        try:
            share = float(value[:-1])
        except ValueError:
            share = -1.0
        if not 0 < share <= 100:
            raise ValueError(f"{text!r}: a share of the node's memory is 1% to 100% (50%, say)")
        return f"{share:g}%"
    try:
        return str(parse_bytes(value))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a memory default: give a share of the node's memory (50%), a "
            "size (16G) or 0 for no limit"
        ) from None


def memory_default(setting: str, node_memory: int) -> int:
    """Bytes of memory a worker without a ``memory`` request is limited to, on a node of
    ``node_memory`` bytes (0: no limit)."""
    normal = parse_memory_default(setting)
    if normal.endswith("%"):
        return max(1, int(node_memory * float(normal[:-1]) / 100)) if node_memory > 0 else 0
    return int(normal)


def hidden_gpu_files(
    pattern: str, machine_gpus: int, given: Iterable[int], shared: Sequence[str]
) -> list[str]:
    """The device files a worker given the machine's GPUs ``given`` (indices) may not open:
    the other GPUs' (``pattern`` with ``{index}``), and ``shared`` when it was given none."""
    mine = set(given)
    hidden = [pattern.format(index=i) for i in range(machine_gpus) if i not in mine]
    if not mine:
        hidden.extend(shared)
    return hidden


def renumbered_devices(visible: Sequence[str]) -> str:
    """``CUDA_VISIBLE_DEVICES`` inside a worker that sees only its own GPUs' device files:
    CUDA numbers the GPUs it can open from 0, so indices become ``0..n-1``; UUIDs stay (they
    name the same GPU inside as out)."""
    if all(d.isdigit() for d in visible):
        return ",".join(str(i) for i in range(len(visible)))
    return ",".join(visible)


def _below(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def kept_paths(private: Sequence[str], wanted: Iterable[str]) -> list[str]:
    """Which of the ``wanted`` host paths (absolute, normalised) must be mounted back into the
    worker's private directories: those below one, less any below another kept path."""
    below = sorted({p for p in wanted if p and any(_below(p, d) for d in private)})
    kept: list[str] = []
    for path in below:
        if not any(_below(path, k) for k in kept):
            kept.append(path)
    return kept
