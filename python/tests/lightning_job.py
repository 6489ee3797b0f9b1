"""A tiny Lightning training used by test_lightning.py (run in a subprocess).

python lightning_job.py --ckpt PATH --total-samples N [--batch B] [--step-sleep S] [--every-n-steps K]

Resumes from --ckpt when it exists.  Prints JSON lines on stdout:
{"event": "start", "samples": ...} once training starts (after any restore) and
{"event": "end", "samples": ..., "batches": ...} when fit returns.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

from tern_train.lightning import TernCallback


class Synthetic(Dataset):
    """Deterministic random regression samples, generated per index."""

    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        x = torch.randn(8, generator=g)
        return x, x.sum(0, keepdim=True)


class Tiny(pl.LightningModule):
    def __init__(self, step_sleep):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.step_sleep = step_sleep
        self.batches = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.batches += 1
        if self.step_sleep:
            time.sleep(self.step_sleep)
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Announce(pl.Callback):
    def __init__(self, tern):
        self.tern = tern

    def on_train_start(self, trainer, pl_module):
        print(json.dumps({"event": "start", "samples": self.tern.run.samples}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--total-samples", type=int, required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--step-sleep", type=float, default=0.02)
    p.add_argument("--every-n-steps", type=int, default=None)
    args = p.parse_args()

    torch.set_num_threads(1)
    tern = TernCallback(
        args.ckpt, local_batch=args.batch, every_n_steps=args.every_n_steps, interval=0.1, save_on_train_end=True
    )
    model = Tiny(args.step_sleep)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=math.ceil(args.total_samples / args.batch),
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[tern, Announce(tern)],
    )
    loader = DataLoader(Synthetic(), batch_size=args.batch, num_workers=0)
    resume = args.ckpt if os.path.exists(args.ckpt) else None
    trainer.fit(model, loader, ckpt_path=resume)
    final = json.load(open(os.environ["TERN_PROGRESS_FILE"])) if os.environ.get("TERN_PROGRESS_FILE") else {}
    print(json.dumps({"event": "end", "samples": final.get("samples"), "batches": model.batches}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
