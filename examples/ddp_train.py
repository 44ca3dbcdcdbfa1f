"""A small PyTorch DDP training job (gloo, CPU), for `make run` and the distributed tests.

Run it under gpuyard in `pytorch` mode: a plain `python ddp_train.py` is wrapped in the torch
launcher, which starts SLOTS processes per node and sets RANK/WORLD_SIZE/LOCAL_RANK for each.
It trains a linear model on synthetic data with a fixed seed, prints the loss on rank 0, checks
that every rank ends with identical weights, and writes them to $GPUYARD_OUTPUT_DIR.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=0.1)
    # The launcher (torchrun's) puts LOCAL_RANK, RANK and WORLD_SIZE in the environment.
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    true_w = torch.arange(1.0, 9.0).unsqueeze(1)
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank sees its own shard
    losses = []
    for step in range(args.steps):
        x = torch.randn(64, 8, generator=generator)
        y = x @ true_w + 0.5
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {losses[-1]:.4f}", flush=True)

    weights = torch.cat([p.detach().flatten() for p in model.module.parameters()])
    digest = hashlib.sha256(json.dumps(weights.tolist()).encode()).hexdigest()
    digests: list[str] = [""] * world
    dist.all_gather_object(digests, digest)
    identical = len(set(digests)) == 1
    out = Path(os.environ.get("GPUYARD_OUTPUT_DIR", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank-{rank}.json").write_text(json.dumps({"digest": digest, "losses": losses}))
    if rank == 0:
        torch.save(model.module.state_dict(), out / "model.pt")
        nodes = os.environ.get("GPUYARD_NUM_NODES", "?")
        verdict = "identical" if identical else "DIFFERENT"
        print(
            f"{world} ranks on {nodes} nodes: weights {verdict}, "
            f"loss {losses[0]:.3f} -> {losses[-1]:.4f}",
            flush=True,
        )
    dist.barrier()  # no rank tears the group down while another still talks to it
    dist.destroy_process_group()
    if not identical:
        raise SystemExit("ranks ended with different weights")
    # torch 2.13's gloo sometimes aborts in the interpreter's own shutdown, after everything
    # above has finished ("terminate called without an active exception", no Python frame
    # left): a C++ thread is still joinable when static destructors run. Nothing is left to
    # do, so leave without running them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
