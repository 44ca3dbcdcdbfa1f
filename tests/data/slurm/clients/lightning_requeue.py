"""Lightning's SLURM auto-requeue, unchanged: on the --signal sent before the time limit it
saves an hpc checkpoint and runs ``scontrol requeue``; the next attempt resumes from it."""

import os
import signal
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _index):
        time.sleep(0.05)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    print(f"attempt restart={os.environ.get('SLURM_RESTART_COUNT', '0')}", flush=True)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=int(os.environ.get("STEPS", "300")),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=os.getcwd(),
    )
    trainer.fit(Model(), DataLoader(data, batch_size=8))
    # Done: a --signal that comes now (a slow machine took its attempt past the signal's
    # time) finds Lightning's handler gone and would kill the finished run (exit 138).
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    print(f"finished step={trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
