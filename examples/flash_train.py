"""A DDP training job (gloo, CPU) that checkpoints every step through gpuyard's checkpoint
service (docs/checkpoints.md).

Each rank calls ``gr.save(step, state)`` after every optimizer step: the state is copied into
its node's memory and training goes on while a process beside it writes it to the job's
storage. At start, ``gr.load()`` (after ``init_process_group``: the ranks agree on one step)
returns the newest step every rank holds whole — from node memory after a restart in place,
from storage elsewhere — and the job goes on from there. The batch of a step depends only on
(seed, step, rank), so a run restarted any number of times ends with the weights of one that
never was. Asked to leave (preemption, `gpuyard suspend`), every rank stops after the same step
and suspends: that step is saved already.

It writes ``rank-<r>.json`` (the final weights' SHA-256) and, on rank 0, ``steps.txt`` (one
line per step done: ``STEP DIGEST`` of the weights after it) to ``$GPUYARD_OUTPUT_DIR``.

    torchrun --standalone --nproc-per-node 2 examples/flash_train.py --steps 50
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import gpuyard.runtime as gr
from gpuyard.runtime.torch import preemption_agreed

FEATURES = 8


def batch(seed: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    key = hashlib.sha256(f"{seed}:{step}:{rank}".encode()).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
    x = torch.randn(32, FEATURES, generator=generator)
    y = torch.tanh(x.sum(dim=1, keepdim=True) / FEATURES) + 0.1 * torch.randn(
        32, 1, generator=generator
    )
    return x, y


def digest(model: torch.nn.Module) -> str:
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return hashlib.sha256(weights.numpy().tobytes()).hexdigest()


def train(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    restored = gr.load()
    if restored is not None:
        model.load_state_dict(restored.state["model"])
        optimizer.load_state_dict(restored.state["optimizer"])
        start = restored.step
        print(
            f"attempt {gr.attempt}: resuming at step {start} from {restored.source}, "
            f"weights {digest(model)}",
            flush=True,
        )
    ddp = DistributedDataParallel(model)
    out = Path(os.environ.get("GPUYARD_OUTPUT_DIR", "."))
    out.mkdir(parents=True, exist_ok=True)
    for step in range(start, args.steps):
        x, y = batch(args.seed, step, rank)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        done = step + 1
        gr.save(done, {"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if rank == 0:
            with open(out / "steps.txt", "a") as lines:
                lines.write(f"{done} {digest(model)}\n")
            gr.report_progress(done, loss=loss.item())
        if args.step_time:
            time.sleep(args.step_time)
        if preemption_agreed():  # a collective: every rank stops after the same step
            gr.acknowledge(rank=rank)
            dist.barrier()
            dist.destroy_process_group()
            gr.suspend()  # the step is saved already; suspend() waits until it is on storage
    final = digest(model)
    (out / f"rank-{rank}.json").write_text(json.dumps({"digest": final, "attempt": gr.attempt}))
    gr.flush()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"done: {args.steps} steps, {world} ranks, weights {final}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--step-time", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument("--seed", type=int, default=0)
    torch.set_num_threads(1)
    train(parser.parse_args())


if __name__ == "__main__":
    try:
        main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    else:
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # torch's gloo may abort in static destructors (examples/preemptible_train.py)
