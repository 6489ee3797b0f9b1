#!/usr/bin/env python3
"""A tiny Lightning training (CPU) that uses tern_train.lightning.TernCallback.
Used by the Rust end-to-end tests.

    python tests/training/lightning_train.py --ckpt PATH --total-samples N
        [--batch B] [--checkpoint-every K] [--step-sleep S]

One process when run with python; under torchrun (WORLD_SIZE > 1) it uses
DDP over the torchrun processes (gloo on CPU).

Resumes from --ckpt when it exists.  On the checkpoint signal it saves --ckpt
at the next batch end, reports checkpoint_samples and exits 0; it also exits
0 once --total-samples samples have been trained (rounded up to whole
batches), saving --ckpt at the end.  --checkpoint-every K saves every K steps
(default: only on the signal and at the end).
"""

import argparse
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

try:
    from tern_train.lightning import TernCallback
except ImportError:  # run from a checkout without PYTHONPATH: use <repo>/python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    from tern_train.lightning import TernCallback


class Synthetic(Dataset):
    """Deterministic regression samples, a pure function of the index."""

    def __len__(self):
        return 1 << 16  # epochs repeat; max_epochs=-1 (keep small: DistributedSampler lists all indices)

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        x = torch.randn(16, generator=g)
        return x, x[:4].sum(0, keepdim=True)


class Tiny(pl.LightningModule):
    def __init__(self, step_sleep):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.step_sleep = step_sleep

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.step_sleep:
            time.sleep(self.step_sleep)
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def main(argv=None):
    p = argparse.ArgumentParser(description="tiny Lightning training with TernCallback")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--total-samples", type=int, required=True)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--step-sleep", type=float, default=0.05)
    args = p.parse_args(argv)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    # One process by default; under torchrun the Trainer takes its shape from
    # the environment (devices per node x nodes, DDP).
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    tern = TernCallback(args.ckpt, local_batch=args.batch, every_n_steps=args.checkpoint_every,
                        save_on_train_end=True)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=local_world_size,
        num_nodes=max(1, world_size // local_world_size),
        strategy="ddp" if world_size > 1 else "auto",
        max_steps=max(1, math.ceil(args.total_samples / (args.batch * world_size))),
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[tern],
    )
    loader = DataLoader(Synthetic(), batch_size=args.batch, shuffle=False, num_workers=0)
    resume = args.ckpt if os.path.exists(args.ckpt) else None
    trainer.fit(Tiny(args.step_sleep), loader, ckpt_path=resume)
    return 0


if __name__ == "__main__":
    sys.exit(main())
