"""Lightning DDP on CPU under srun: Lightning must find SLURMEnvironment (2 nodes x 2 tasks)."""

import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        num_nodes=2,
        strategy="ddp",
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    env = type(trainer.strategy.cluster_environment).__name__
    trainer.fit(Model(), DataLoader(data, batch_size=8))
    print(
        f"rank={trainer.global_rank} world={trainer.world_size} node={trainer.node_rank} "
        f"env={env} steps={trainer.global_step} procid={os.environ['SLURM_PROCID']}",
        flush=True,
    )


if __name__ == "__main__":
    main()
