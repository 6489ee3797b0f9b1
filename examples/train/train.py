#!/usr/bin/env python3
"""A small training that keeps the tern agent contract (README, "Contract for
training scripts"): what `tern demo --local-agents` runs, and a starting point
for your own script on `tern controller --local-agents`.

    python3 train.py --samples N [--batch B] [--step-seconds S]
                     [--checkpoint PATH] [--log PATH]

It fits a linear model to a fixed target, saving the weights and the samples
done to --checkpoint (default: $CHECKPOINT, else ./checkpoint.json) every few
seconds and on the checkpoint signal, and resumes from it.  With PyTorch
importable it trains with torch on the CPU; without, in plain Python, so the
demo runs anywhere.  --log appends one JSON line per event (start, checkpoint,
stop, done) for whoever wants to see what happened.
"""

import argparse
import json
import os
import random
import signal
import sys
import time

try:
    import torch
except ImportError:  # plain Python: the same contract, no tensors
    torch = None

DIM = 8
TARGET = [0.5 * (i + 1) for i in range(DIM)]


def write_atomic(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Model:
    """y = w·x, fitted by SGD on batches drawn from a fixed seed per step."""

    def __init__(self, weights=None):
        w = weights or [0.0] * DIM
        self.w = torch.tensor(w, requires_grad=True) if torch else list(w)

    def weights(self):
        return self.w.detach().tolist() if torch else list(self.w)

    def step(self, step, batch, lr=0.1):
        rng = random.Random(step)
        xs = [[rng.uniform(-1, 1) for _ in range(DIM)] for _ in range(batch)]
        ys = [sum(t * x for t, x in zip(TARGET, row)) for row in xs]
        if torch:
            x, y = torch.tensor(xs), torch.tensor(ys)
            loss = ((x @ self.w - y) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                self.w -= lr * self.w.grad
                self.w.grad.zero_()
            return float(loss.detach())
        loss, grad = 0.0, [0.0] * DIM
        for row, y in zip(xs, ys):
            err = sum(w * x for w, x in zip(self.w, row)) - y
            loss += err * err / batch
            for i, x in enumerate(row):
                grad[i] += 2 * err * x / batch
        self.w = [w - lr * g for w, g in zip(self.w, grad)]
        return loss


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, required=True, help="the job's work, in samples")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--step-seconds", type=float, default=0.1,
                   help="each step's length (a stand-in for a real model's compute)")
    p.add_argument("--checkpoint", default=os.environ.get("CHECKPOINT", "checkpoint.json"))
    p.add_argument("--log", default=os.environ.get("TRAIN_LOG"))
    args = p.parse_args(argv)

    stopping = []
    signame = os.environ.get("TERN_CHECKPOINT_SIGNAL", "SIGTERM")
    signal.signal(getattr(signal, signame), lambda *_: stopping.append(signame))
    progress = os.environ.get("TERN_PROGRESS_FILE")
    incarnation = os.environ.get("TERN_INCARNATION")

    def log(event, **fields):
        if args.log:
            with open(args.log, "a") as f:
                f.write(json.dumps({"event": event, "time": time.time(),
                                    "incarnation": incarnation, **fields}) + "\n")

    model, samples, step = Model(), 0, 0
    if os.path.exists(args.checkpoint):
        with open(args.checkpoint) as f:
            saved = json.load(f)
        model, samples, step = Model(saved["weights"]), saved["samples"], saved["step"]
    saved_at = samples
    log("start", resumed_from=samples, torch=torch is not None)
    times = []

    def report():
        if not progress:
            return
        data = {"samples": samples, "checkpoint_samples": saved_at}
        if incarnation:
            data["incarnation"] = int(incarnation)
        if len(times) >= 3 and os.environ.get("TERN_ACCELERATOR"):
            recent = sorted(times[-20:])
            data.update(step_seconds=recent[len(recent) // 2], local_batch=args.batch,
                        accelerator=os.environ["TERN_ACCELERATOR"], gpus=1, nodes=1)
        write_atomic(progress, data)

    def save():
        nonlocal saved_at
        write_atomic(args.checkpoint, {"weights": model.weights(), "samples": samples,
                                       "step": step})
        saved_at = samples
        log("checkpoint", samples=samples)
        report()

    last_save = last_report = time.monotonic()
    loss = None
    while samples < args.samples and not stopping:
        began = time.monotonic()
        loss = model.step(step, args.batch)
        time.sleep(max(0.0, args.step_seconds - (time.monotonic() - began)))
        step, samples = step + 1, samples + args.batch
        now = time.monotonic()
        times.append(now - began)
        if now - last_save >= 5.0 or samples >= args.samples:
            save()
            last_save = now
        elif now - last_report >= 1.0:
            report()
            last_report = now
    if samples > saved_at or stopping:
        save()
    log("stop" if stopping else "done", samples=samples, loss=loss)
    return 0


if __name__ == "__main__":
    sys.exit(main())
