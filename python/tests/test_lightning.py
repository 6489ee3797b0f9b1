"""End-to-end test of tern_train.lightning.TernCallback with a real Lightning
Trainer on CPU, in subprocesses (skipped when lightning is not installed).

Run from python/:  python -m unittest discover -s tests -v
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
JOB = os.path.join(HERE, "lightning_job.py")


def _have(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


HAVE_LIGHTNING = _have("torch") and (_have("lightning") or _have("pytorch_lightning"))


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


@unittest.skipUnless(HAVE_LIGHTNING, "torch and lightning are not installed")
class TernCallbackTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.ckpt = os.path.join(self.dir, "ckpt", "last.ckpt")
        self.progress = os.path.join(self.dir, "progress.json")
        self.env = dict(os.environ)
        for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TERN_CHECKPOINT_SIGNAL",
                    "TERN_STOP_FILE", "TERN_ACCELERATOR"):
            self.env.pop(key, None)
        self.env.update(
            PYTHONPATH=PACKAGE_ROOT + os.pathsep + self.env.get("PYTHONPATH", ""),
            TERN_PROGRESS_FILE=self.progress,
            TERN_INCARNATION="1",
            OMP_NUM_THREADS="1",
        )

    def start(self, total, *extra):
        cmd = [sys.executable, JOB, "--ckpt", self.ckpt, "--total-samples", str(total), *extra]
        proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(_kill, proc)
        return proc

    def events(self, stdout):
        out = []
        for line in stdout.splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def test_sigterm_saves_checkpoint_then_resume_continues(self):
        import torch

        # 1. Train "forever", stop with SIGTERM once some samples are reported.
        proc = self.start(10**6)
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            progress = _read_json(self.progress)
            if progress and progress["samples"] >= 16:
                break
            if proc.poll() is not None:
                self.fail("training exited early: " + proc.communicate()[1][-3000:])
            time.sleep(0.05)
        else:
            self.fail("no progress reported")
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        stdout, stderr = proc.communicate(timeout=20)
        exit_seconds = time.monotonic() - signalled
        self.assertEqual(proc.returncode, 0, stderr[-3000:])
        self.assertLess(exit_seconds, 10)

        self.assertTrue(os.path.exists(self.ckpt))
        saved = torch.load(self.ckpt, map_location="cpu", weights_only=False)
        saved_samples = saved["tern"]["samples"]
        progress = _read_json(self.progress)
        self.assertGreater(saved_samples, 0)
        self.assertEqual(progress["checkpoint_samples"], saved_samples)
        self.assertEqual(progress["samples"], saved_samples)
        self.assertEqual(progress["incarnation"], 1)
        self.assertEqual(saved["global_step"] * 4, saved_samples)  # batch 4, one process
        # fit() returned normally (no SIGTERMException exit): the "end" line was printed.
        self.assertIn("end", [e["event"] for e in self.events(stdout)])

        # 2. Resume: the count continues from the checkpoint up to the target.
        total = int(saved_samples) + 40
        proc = self.start(total)
        stdout, stderr = proc.communicate(timeout=40)
        self.assertEqual(proc.returncode, 0, stderr[-3000:])
        events = {e["event"]: e for e in self.events(stdout)}
        self.assertEqual(events["start"]["samples"], saved_samples)
        self.assertEqual(events["end"]["batches"], 10)  # only the 40 missing samples were trained
        self.assertEqual(events["end"]["samples"], total)
        # save_on_train_end: the end of training is a durable checkpoint too.
        self.assertEqual(_read_json(self.progress), {"samples": total, "checkpoint_samples": total, "incarnation": 1})
        self.assertEqual(torch.load(self.ckpt, map_location="cpu", weights_only=False)["tern"]["samples"], total)


def _kill(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    unittest.main()
