"""Benchmark: the training stall of one checkpoint, and the time to load it back after a fault.

What is measured, in one run on this machine
--------------------------------------------
The state is ``--gib`` GiB of float32 tensors in 64 MiB pieces (a model and its optimizer
state, as a state dict holds them), on the CPU (``--device cuda`` moves it to the GPU first).

1. **Stall per save** (the time ``save`` takes before training may go on), median of
   ``--saves`` saves after one warm-up save (the first save of a job also sizes its node
   memory: reported apart):

   - ``gpuyard save``: `gpuyard.runtime.flash` into node memory (a directory on ``/dev/shm``),
     its persister writing to the checkpoint directory beside;
   - ``torch.save``: to a file on local disk (the checkpoint directory), flushed and synced,
     as `gpuyard.runtime.save_checkpoint` does;
   - ``dcp.async_save``: ``torch.distributed.checkpoint.async_save`` to the checkpoint
     directory (one process, gloo), until it returns its future.

   Goal: the service's stall at most 0.25 s for 1 GiB and at most 1/10 of ``torch.save``'s.
2. **Load after a fault**: a fresh process (``python -c``: interpreter, torch, the state read)
   loads the newest step from node memory (a restart in place) and from storage (a restart
   elsewhere); the storage file's pages are dropped from the page cache first
   (``posix_fadvise``), as another node would not have them.

    .venv/bin/python bench/checkpoint.py --gib 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from gpuyard.runtime.contract import JobEnvironment
from gpuyard.runtime.flash import CheckpointService
from gpuyard.runtime.flash_format import stored_steps
from gpuyard.runtime.process import Runtime

PIECE = 16 << 20  # float32 elements: 64 MiB


def make_state(gib: float, device: str) -> dict[str, Any]:
    total = int(gib * (1 << 30)) // 4
    pieces, left = {}, total
    while left > 0:
        n = min(PIECE, left)
        pieces[f"layer{len(pieces)}.weight"] = torch.randn(n, device=device)
        left -= n
    return {"model": pieces, "step": 0}


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def bench_service(
    root: Path, memory: Path, state: dict[str, Any], saves: int, interval: float
) -> tuple[float, list[float], float]:
    environ = {
        "GPUYARD_CHECKPOINT_DIR": str(root / "checkpoints"),
        "GPUYARD_CHECKPOINT_MEMORY_DIR": str(memory),
        "GPUYARD_CHECKPOINT_KEEP": "2",
    }
    runtime = Runtime(JobEnvironment.from_environ(environ, cwd=root))
    svc = CheckpointService(runtime, environ, rank=0, world=1)
    first = timed(lambda: svc.save(0, state))
    stalls = []
    for step in range(1, saves + 2):
        stalls.append(timed(lambda s=step: svc.save(s, state)))  # type: ignore[misc]
        time.sleep(interval)  # training between saves; the persister works meanwhile
    flush = timed(lambda: svc.flush(timeout=600))
    return first, stalls[1:], flush


def bench_torch_save(root: Path, state: dict[str, Any], saves: int) -> list[float]:
    path = root / "torch" / "checkpoint.pt"
    path.parent.mkdir(parents=True)

    def one() -> None:
        with open(path, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())

    return [timed(one) for _ in range(saves)]


def bench_dcp(root: Path, state: dict[str, Any], saves: int) -> list[float] | str:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    try:
        if not dist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(29_000 + os.getpid() % 1000))
            dist.init_process_group("gloo", rank=0, world_size=1)
        stalls, pending = [], None
        for step in range(saves + 1):
            if pending is not None:
                pending.result()
            start = time.perf_counter()
            pending = dcp.async_save(
                state["model"], checkpoint_id=str(root / "dcp" / f"step-{step}")
            )
            stalls.append(time.perf_counter() - start)
        if pending is not None:
            pending.result()
        return stalls[1:]
    except Exception as exc:
        return f"not measured: {type(exc).__name__}: {exc}"


LOAD = """
import sys, time
from pathlib import Path
start = float(sys.argv[1])
from gpuyard.runtime.contract import JobEnvironment
from gpuyard.runtime.flash import CheckpointService
from gpuyard.runtime.process import Runtime
environ = {"GPUYARD_CHECKPOINT_DIR": sys.argv[2], "GPUYARD_CHECKPOINT_MEMORY_DIR": sys.argv[3]}
runtime = Runtime(JobEnvironment.from_environ(environ, cwd=Path(".")))
svc = CheckpointService(runtime, environ, rank=0, world=1)
import torch  # noqa: E402,F401 - a training script has it already: the read is timed alone
ready = time.time()
restored = svc.load()
assert restored is not None
print(restored.source, time.time() - start, time.time() - ready)
"""


def bench_load(root: Path, memory: Path) -> tuple[str, float, float]:
    result = subprocess.run(
        [sys.executable, "-c", LOAD, repr(time.time()), str(root / "checkpoints"), str(memory)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    source, seconds, loading = result.stdout.split()
    return source, float(seconds), float(loading)


def drop_cache(root: Path) -> None:
    for step in stored_steps(root / "checkpoints"):
        for part in step.path.iterdir():
            fd = os.open(part, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def median(values: list[float]) -> float:
    return statistics.median(values)


def memcpy_floor(state: dict[str, Any]) -> float:
    """One copy of the state into memory already allocated: what any save into memory costs."""
    pieces = list(state["model"].values())
    total = sum(p.numel() for p in pieces)
    target = torch.empty(total, dtype=torch.float32, device=pieces[0].device)

    def copy() -> None:
        offset = 0
        for p in pieces:
            target[offset : offset + p.numel()].copy_(p.reshape(-1))
            offset += p.numel()

    copy()
    return median([timed(copy) for _ in range(3)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--interval",
        type=float,
        default=3.0,
        help="seconds of training between two saves (the persister writes meanwhile)",
    )
    parser.add_argument("--dir", default="", help="storage (default: a temp dir in /var/tmp)")
    args = parser.parse_args()
    storage = Path(tempfile.mkdtemp(prefix="gpuyard-bench-ckpt-", dir=args.dir or "/var/tmp"))
    memory = Path(tempfile.mkdtemp(prefix="gpuyard-bench-mem-", dir="/dev/shm"))
    try:
        run(args, storage, memory)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
        shutil.rmtree(memory, ignore_errors=True)
    return 0


def run(args: argparse.Namespace, storage: Path, memory: Path) -> None:
    state = make_state(args.gib, args.device)
    print(f"state: {args.gib} GiB of float32 on {args.device}; storage {storage}, memory {memory}")
    floor = memcpy_floor(state)
    print(f"memcpy floor    {floor:.3f} s (one copy of the state into allocated memory)")
    first, stalls, flush = bench_service(storage, memory, state, args.saves, args.interval)
    ours = median(stalls)
    print(
        f"gpuyard save    stall median {ours:.3f} s (max {max(stalls):.3f}; "
        f"first save {first:.3f} s; flush at the end {flush:.3f} s)"
    )
    base = median(bench_torch_save(storage, state, args.saves))
    print(f"torch.save      stall median {base:.3f} s (to disk, synced)")
    dcp = bench_dcp(storage, state, args.saves)
    print(f"dcp.async_save  stall {dcp if isinstance(dcp, str) else f'median {median(dcp):.3f} s'}")
    goal = min(0.25 * args.gib, base / 10)
    verdict = "met" if ours <= goal else f"missed by {ours - goal:.3f} s"
    print(f"goal: <= {0.25 * args.gib:.2f} s and <= torch.save/10 ({base / 10:.3f} s): {verdict}")
    print(
        f"gpuyard save / torch.save: {ours / base:.3f}; gpuyard save / memcpy: {ours / floor:.2f}"
    )
    del state
    in_memory = bench_load(storage, memory)
    for slot in memory.iterdir():
        slot.unlink()
    drop_cache(storage)
    from_storage = bench_load(storage, memory)
    print(
        f"fault -> state loaded (a new process: Python, torch, the read): from {in_memory[0]} "
        f"{in_memory[1]:.2f} s (the read {in_memory[2]:.2f} s), from {from_storage[0]} "
        f"{from_storage[1]:.2f} s (the read {from_storage[2]:.2f} s; page cache dropped)"
    )


if __name__ == "__main__":
    sys.exit(main())
