#!/usr/bin/env python3
"""A single-process PyTorch training written straight from the tern agent
contract, without the tern_train helper: it catches the checkpoint signal and
writes the progress file itself.  Used by the Rust end-to-end tests to show
that the agent works with code that does not use the helper.

    python tests/training/plain_loop.py --ckpt PATH --total-samples N
        [--batch B] [--checkpoint-every K] [--step-sleep S] [--log-file PATH]
        [--max-steps K] [--ignore-signal]

Same options, defaults and --log-file events as train_ddp.py (start,
checkpoint, stop, done; rank is always 0).  Resumes from --ckpt when it exists.
"""

import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

stop = {"requested": False, "reason": None}


def on_checkpoint_signal(signum, frame):
    # Only record it; the loop saves at the end of the current step.
    stop["requested"] = True
    stop["reason"] = "signal"
    stop_file = os.environ.get("TERN_STOP_FILE")
    if stop_file:
        try:
            with open(stop_file) as f:
                stop["reason"] = json.load(f).get("reason") or "signal"
        except (OSError, ValueError, AttributeError):
            pass


def write_progress(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description="tern contract demo without tern_train")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--total-samples", type=int, required=True)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--log-file", "--log", dest="log", default=None)
    p.add_argument("--max-steps", type=int, default=None,
                   help="this start's own step limit: save and exit 0 after K steps, work left or not")
    p.add_argument("--ignore-signal", action="store_true",
                   help="ignore the checkpoint signal (a training that never stops by itself)")
    args = p.parse_args(argv)

    signame = os.environ.get("TERN_CHECKPOINT_SIGNAL") or "SIGTERM"
    handler = signal.SIG_IGN if args.ignore_signal else on_checkpoint_signal
    signal.signal(getattr(signal, signame), handler)
    progress_path = os.environ.get("TERN_PROGRESS_FILE")
    incarnation = os.environ.get("TERN_INCARNATION")
    accelerator = os.environ.get("TERN_ACCELERATOR")

    def log(event, **fields):
        if args.log:
            with open(args.log, "a") as f:
                f.write(json.dumps({"event": event, "rank": 0, "world_size": 1, "pid": os.getpid(),
                                    "time": time.time(), **fields}) + "\n")

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    samples, step, resumed_from = 0, 0, None
    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        samples, step = int(state["samples"]), int(state["step"])
        resumed_from = samples
    checkpoint_samples = samples
    log("start", incarnation=int(incarnation) if incarnation else None, resumed_from=resumed_from)

    step_times = []
    last_end = None
    last_write = 0.0

    def report():
        if not progress_path:
            return
        data = {"samples": samples, "checkpoint_samples": checkpoint_samples}
        if incarnation:
            data["incarnation"] = int(incarnation)
        if accelerator and step_times:
            recent = sorted(step_times[-20:])
            data.update(step_seconds=recent[len(recent) // 2], accelerator=accelerator,
                        gpus=1, nodes=1, local_batch=args.batch)
        write_progress(progress_path, data)

    def save():
        nonlocal checkpoint_samples
        tmp = args.ckpt + ".tmp"
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "samples": samples, "step": step}, tmp)
        os.replace(tmp, args.ckpt)
        checkpoint_samples = samples
        log("checkpoint", samples=samples, step=step)
        report()

    steps_here = 0
    while samples < args.total_samples:
        if args.max_steps is not None and steps_here >= args.max_steps:
            save()
            log("limit", samples=samples, steps=steps_here)
            return 0
        steps_here += 1
        g = torch.Generator().manual_seed(step)
        x = torch.randn(args.batch, 16, generator=g)
        y = x[:, :4].sum(dim=1, keepdim=True)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.step_sleep)
        step += 1
        samples += args.batch
        now = time.monotonic()
        if last_end is not None and step > 2:
            step_times.append(now - last_end)
        last_end = now
        if stop["requested"] or step % args.checkpoint_every == 0 or samples >= args.total_samples:
            save()
        elif now - last_write >= 1.0:
            report()
            last_write = now
        if stop["requested"]:
            log("stop", samples=samples, reason=stop["reason"])
            return 0
    if resumed_from is None and step == 0:
        save()
    log("done", samples=samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
