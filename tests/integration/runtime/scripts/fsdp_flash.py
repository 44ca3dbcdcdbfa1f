"""A 2-rank FSDP2 model (DTensor shards, CPU, gloo) saved through the checkpoint service with
torch.distributed.checkpoint's state dicts, and resumed: ``save`` trains 3 steps, saves, trains
2 more and prints the weights' digest; ``load`` loads into fresh state dicts, trains the same 2
steps and prints the digest and where the state came from. Run under torchrun."""

import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import gpuyard.runtime as gr

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
fully_shard(model, mesh=mesh)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def train(steps: int) -> None:
    for i in range(steps):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(i))
        loss = model(x).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def digest() -> str:
    weights, _ = get_state_dict(model, optimizer)
    full = [v.full_tensor() if hasattr(v, "full_tensor") else v for v in weights.values()]
    return hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in full)).hexdigest()


if sys.argv[1] == "save":
    train(3)
    weights, optim = get_state_dict(model, optimizer)
    assert type(next(iter(weights.values()))).__name__ == "DTensor"
    gr.save(3, {"model": weights, "optim": optim})
    gr.flush()
    train(2)
    print("digest", digest(), "saved", flush=True)
else:
    weights, optim = get_state_dict(model, optimizer)
    restored = gr.load(into={"model": weights, "optim": optim})
    set_state_dict(
        model,
        optimizer,
        model_state_dict=restored.state["model"],
        optim_state_dict=restored.state["optim"],
    )
    train(2)
    print("digest", digest(), restored.source, restored.step, flush=True)
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # gloo may abort in static destructors (examples/preemptible_train.py)
