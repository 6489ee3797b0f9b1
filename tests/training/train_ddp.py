#!/usr/bin/env python3
"""A small data-parallel PyTorch training that follows the tern agent contract
through tern_train.  Used by the Rust end-to-end tests.

    torchrun --nnodes 1 --nproc-per-node 2 tests/training/train_ddp.py --ckpt PATH --total-samples N
    python tests/training/train_ddp.py --ckpt PATH --total-samples N

Options: --batch B (samples per process per step, default 16),
--checkpoint-every K (steps, default 20), --step-sleep S (seconds slept per
step, default 0.05), --log-file PATH (JSON lines, see below; "--log" also
works without torchrun).

With WORLD_SIZE > 1 it initialises a process group: gloo, or nccl when CUDA is
available; TERN_BACKEND overrides.  It resumes from --ckpt when that file
exists (model, optimizer, samples, step; any worker count).  Every K steps, on
the checkpoint signal (all ranks agree at the same step) and when
--total-samples is reached, rank 0 saves --ckpt atomically, all ranks meet at a
barrier, then progress reports the checkpoint.  After a stop or at the target
it exits 0.

--log-file gets one JSON object per line, appended, each with "event", "rank",
"world_size", "pid" and "time":
  start       (every rank)  + incarnation (int or null), resumed_from (samples or null)
  checkpoint  (rank 0)      + samples, step
  stop        (every rank)  + samples, reason (stop file reason, "signal", or "peer")
  done        (every rank)  + samples   -- target reached
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

try:
    import tern_train
except ImportError:  # run from a checkout without PYTHONPATH: use <repo>/python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import tern_train

FEATURES = 16


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", required=True, help="shared checkpoint file (resumed from when it exists)")
    p.add_argument("--total-samples", type=int, required=True, help="stop and exit 0 after this many samples")
    p.add_argument("--batch", type=int, default=16, help="local batch per process (default 16)")
    p.add_argument("--checkpoint-every", type=int, default=20, help="checkpoint every K steps (default 20)")
    p.add_argument("--step-sleep", type=float, default=0.05, help="sleep per step in seconds (default 0.05)")
    # Spelled --log-file because torchrun refuses "--log" even after the script
    # name: its argparse sees an ambiguous abbreviation of its own --log-dir,
    # --log-line-prefix-template and --logs-specs.  "--log" is kept as an alias
    # for runs without torchrun.
    p.add_argument("--log-file", "--log", dest="log", default=None, help="append JSON event lines to this file")
    p.add_argument("--log-steps", action="store_true", help="also log each step's wall time (event \"step\")")
    args = p.parse_args(argv)
    if args.batch < 1 or args.checkpoint_every < 1 or args.total_samples < 0 or args.step_sleep < 0:
        p.error("--batch and --checkpoint-every must be >= 1, --total-samples and --step-sleep >= 0")
    return args


class Logger:
    def __init__(self, path, rank, world_size):
        self.path, self.rank, self.world_size = path, rank, world_size

    def __call__(self, event, **fields):
        if not self.path:
            return
        record = {"event": event, "rank": self.rank, "world_size": self.world_size,
                  "pid": os.getpid(), "time": time.time(), **fields}
        line = (json.dumps(record) + "\n").encode("utf-8")
        # One write() on an O_APPEND descriptor: lines of several ranks do not interleave.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def batch_for(step, rank, size, device):
    """Synthetic regression batch, a pure function of (step, rank)."""
    g = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(size, FEATURES, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True) + 0.1 * torch.randn(size, 1, generator=g)
    return x.to(device), y.to(device)


def save_atomically(state, path):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def choose_backend():
    override = os.environ.get("TERN_BACKEND", "").strip()
    if override:
        return override
    return "nccl" if torch.cuda.is_available() else "gloo"


def main(argv=None):
    args = parse_args(argv)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    distributed = world_size > 1
    torch.set_num_threads(1)

    device = torch.device("cpu")
    if distributed:
        backend = choose_backend()
        if backend == "nccl":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        dist.init_process_group(backend=backend)
        rank = dist.get_rank()
    else:
        rank = 0
    log = Logger(args.log, rank, world_size)

    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    samples, step, resumed_from = 0.0, 0, None
    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        samples, step = float(state["samples"]), int(state["step"])
        resumed_from = samples
    net = torch.nn.parallel.DistributedDataParallel(model) if distributed else model

    run = tern_train.Run(samples=samples, local_batch=args.batch)
    log("start", incarnation=run.env.incarnation, resumed_from=resumed_from)

    def checkpoint():
        if rank == 0:
            save_atomically(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "samples": run.samples, "step": step},
                args.ckpt,
            )
            log("checkpoint", samples=run.samples, step=step)
        if distributed:
            dist.barrier()  # the file is complete before any rank reports it
        run.checkpointed()

    outcome = "done"
    while run.samples < args.total_samples:
        began = time.monotonic()
        with run.step():
            x, y = batch_for(step, rank, args.batch, device)
            loss = F.mse_loss(net(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if args.step_sleep:
                time.sleep(args.step_sleep)
        step += 1
        if args.log_steps:
            log("step", seconds=time.monotonic() - began, step=step)
        stop = run.should_stop()  # collective: reached by every rank at every step
        if stop or step % args.checkpoint_every == 0 or run.samples >= args.total_samples:
            checkpoint()
        if stop:
            outcome = "stop"
            break
    else:
        if resumed_from is None and run.steps == 0:
            checkpoint()  # --total-samples 0 on a fresh start: still leave a checkpoint

    if outcome == "stop":
        log("stop", samples=run.samples, reason=run.stop_reason)
    else:
        log("done", samples=run.samples)
    run.close()
    if distributed:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
