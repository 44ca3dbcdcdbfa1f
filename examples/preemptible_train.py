"""A preemptible PyTorch DDP training job (gloo, CPU) that uses gpuyard.runtime.

It trains a small model with SGD + momentum on synthetic data and can be suspended at any step
boundary and resumed, ending with weights bit-identical to a run that was never interrupted:

- it resumes from its checkpoint (model, optimizer with its momentum, the next step) when one
  exists in ``$GPUYARD_CHECKPOINT_DIR``;
- the batch of a step depends only on (seed, step, rank), never on how many steps this process
  has run, so a resumed run sees exactly the batches the uninterrupted one saw;
- every step, every rank asks `preemption_agreed()` (one tiny all-reduce), so all ranks stop
  after the same step: they acknowledge, rank 0 saves, all wait for the save, all suspend;
- with ``--checkpoint-every N`` it also saves every N steps, so that a restart after a fault
  (docs/fault-tolerance.md) resumes from there and replays the same batches;
- with ``--service`` it saves every step through the checkpoint service instead
  (`gpuyard.runtime.save`: into node memory, persisted beside; docs/checkpoints.md) and
  resumes with `gpuyard.runtime.load`, so a restart replays no step;
- with ``--nan-at STEP`` the first attempt's batch of that step is corrupted (NaN inputs, an
  error of the job's own data): every rank sees a NaN loss, prints ``loss is nan`` and exits
  with 1 before the step changes any weight. A later attempt replays that step with its true
  batch, so a job restarted after it (``retry_job_errors``) still ends bit-identical.

At the end it writes ``rank-<r>.json`` with a digest of its final weights (SHA-256 of their
bytes) to ``$GPUYARD_OUTPUT_DIR``. Run it with torchrun, under gpuyard in ``pytorch`` mode, or
on a laptop through the runtime's simulator::

    python -m gpuyard.runtime simulate --after 3 -- \\
        torchrun --standalone --nproc-per-node 2 examples/preemptible_train.py --step-time 0.1
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
    """The data of one step on one rank: a function of (seed, step, rank) alone."""
    key = hashlib.sha256(f"{seed}:{step}:{rank}".encode()).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
    x = torch.randn(32, FEATURES, generator=generator)
    true_w = torch.arange(1.0, FEATURES + 1.0).unsqueeze(1)
    y = torch.tanh(x @ true_w / FEATURES) + 0.1 * torch.randn(32, 1, generator=generator)
    return x, y


def build(seed: int, lr: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return model, optimizer


def digest(model: torch.nn.Module) -> str:
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return hashlib.sha256(weights.numpy().tobytes()).hexdigest()


def save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, rank: int) -> None:
    """Rank 0 saves; no rank goes on before the checkpoint is whole on disk."""
    if rank == 0:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        gr.save_checkpoint(state, step=step)
        print(f"checkpoint at step {step}", flush=True)
    dist.barrier()


def resume(
    args: argparse.Namespace, model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int
) -> int:
    """Load the newest checkpoint, if any; the step to start at."""
    checkpoint = gr.load_checkpoint() if not args.service else None
    if args.service and (restored := gr.load()) is not None:
        checkpoint = {**restored.state, "step": restored.step}
    if checkpoint is None:
        return 0
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if rank == 0:
        print(f"attempt {gr.attempt}: resuming at step {checkpoint['step']}", flush=True)
    return int(checkpoint["step"])


def leave_for_preemption(
    args: argparse.Namespace,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    rank: int,
) -> None:
    gr.acknowledge(rank=rank)
    if rank == 0 and not args.service:  # the service saved this step already
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,  # the next step to run
        }
        gr.save_checkpoint(state, step=step)
        print(f"preempted ({gr.preemption_reason()}): saved at step {step}", flush=True)
    dist.barrier()  # no rank leaves before the checkpoint is whole on disk
    dist.destroy_process_group()
    gr.suspend()


def train(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, optimizer = build(args.seed, args.lr)
    start = resume(args, model, optimizer, rank)
    ddp = DistributedDataParallel(model)
    every = 0 if args.service else args.checkpoint_every

    for step in range(start, args.steps):
        if every and step > start and step % every == 0:
            save(model, optimizer, step, rank)
        if preemption_agreed():  # a collective: every rank, every step
            leave_for_preemption(args, model, optimizer, step, rank)
        x, y = batch(args.seed, step, rank)
        if step == args.nan_at and gr.attempt == 0:
            x = x * float("nan")
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        if not torch.isfinite(loss):  # before backward(): no weight has seen it
            print(f"step {step}: loss is {loss.item()}", flush=True)
            raise SystemExit(f"rank {rank}: non-finite loss at step {step}")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.service:  # every rank its own part: "the next step" is step + 1
            gr.save(step + 1, {"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if rank == 0:
            gr.report_progress(step, loss=loss.item())
        if args.step_time:
            time.sleep(args.step_time)

    final = digest(model)
    digests: list[str] = [""] * world
    dist.all_gather_object(digests, final)
    out = Path(os.environ.get("GPUYARD_OUTPUT_DIR", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank-{rank}.json").write_text(
        json.dumps({"digest": final, "steps": args.steps, "attempt": gr.attempt})
    )
    if rank == 0:
        print(f"done: {args.steps} steps, {world} ranks, weights {final[:16]}", flush=True)
    gr.flush()  # the last step on storage before the process leaves with os._exit
    # Every rank must be done with the group before any rank tears it down: gloo aborts a peer
    # whose connection closes under it.
    dist.barrier()
    dist.destroy_process_group()
    if len(set(digests)) != 1:
        raise SystemExit("ranks ended with different weights")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-time", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--checkpoint-every", type=int, default=0, help="also save every N steps (0: never)"
    )
    parser.add_argument(
        "--service",
        action="store_true",
        help="save every step through the checkpoint service (gpuyard.runtime.save)",
    )
    parser.add_argument(
        "--nan-at",
        type=int,
        default=-1,
        metavar="STEP",
        help="make the loss NaN at this step on attempt 0 (a fault of the job's own)",
    )
    # The launcher (torchrun's) puts LOCAL_RANK, RANK and WORLD_SIZE in the environment.
    args = parser.parse_args()
    torch.set_num_threads(1)
    train(args)


def leave(code: object) -> None:
    """Exit with `code` without the interpreter's own shutdown.

    torch 2.13's gloo sometimes aborts while static destructors run, after the process group
    is gone ("terminate called without an active exception"), which turns a clean 0 — or the
    75 of `gpuyard.runtime.suspend` — into a SIGABRT. Everything is flushed and written by
    now, so leave without running them.
    """
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    try:
        main()
    except SystemExit as stop:  # suspend() raises SystemExit(75); argparse exits with 0 or 2
        leave(stop.code)
    leave(0)
