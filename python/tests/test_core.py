"""Tests of the standard-library core of tern_train (no torch needed).

Run from python/:  python -m unittest discover -s tests -v
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest
import warnings
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)

import tern_train  # noqa: E402
from tern_train import _run as run_module  # noqa: E402


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.addCleanup(self._tmp.cleanup)

    def path(self, name):
        return os.path.join(self.dir, name)

    def make_run(self, environ=None, **kwargs):
        kwargs.setdefault("handle_signal", False)
        run = tern_train.Run(settings=tern_train.env(environ or {}), **kwargs)
        self.addCleanup(run.close)
        return run


class FakeClock:
    """Stands in for the ``time`` module inside tern_train._run."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def time(self):
        return time.time()


class WriteProgressTest(TempDirTest):
    def test_writes_json_and_leaves_no_temp_file(self):
        target = self.path("progress.json")
        tern_train.write_progress(target, {"samples": 10.0, "checkpoint_samples": 0.0})
        tern_train.write_progress(target, {"samples": 20.0, "checkpoint_samples": 10.0})
        self.assertEqual(read_json(target), {"samples": 20.0, "checkpoint_samples": 10.0})
        self.assertEqual(os.listdir(self.dir), ["progress.json"])

    def test_replaces_with_rename_not_in_place(self):
        target = self.path("progress.json")
        tern_train.write_progress(target, {"samples": 1.0, "checkpoint_samples": 0.0})
        before = os.stat(target).st_ino
        tern_train.write_progress(target, {"samples": 2.0, "checkpoint_samples": 0.0})
        self.assertNotEqual(os.stat(target).st_ino, before)

    def test_creates_missing_directory(self):
        target = self.path("a/b/progress.json")
        tern_train.write_progress(target, {"samples": 0.0, "checkpoint_samples": 0.0})
        self.assertEqual(read_json(target)["samples"], 0.0)

    def test_bad_data_keeps_old_file_and_no_temp(self):
        target = self.path("progress.json")
        tern_train.write_progress(target, {"samples": 5.0, "checkpoint_samples": 0.0})
        with self.assertRaises(ValueError):
            tern_train.write_progress(target, {"samples": float("nan"), "checkpoint_samples": 0.0})
        with self.assertRaises(TypeError):
            tern_train.write_progress(target, {"samples": object()})
        with self.assertRaises(TypeError):
            tern_train.write_progress(target, [1, 2])
        self.assertEqual(read_json(target)["samples"], 5.0)
        self.assertEqual(os.listdir(self.dir), ["progress.json"])


class EnvTest(unittest.TestCase):
    def test_defaults(self):
        e = tern_train.env({})
        self.assertIsNone(e.job)
        self.assertIsNone(e.progress_file)
        self.assertIsNone(e.incarnation)
        self.assertEqual(e.checkpoint_signal, signal.SIGTERM)
        self.assertIsNone(e.stop_grace_seconds)
        self.assertIsNone(e.stop_file)
        self.assertIsNone(e.accelerator)
        self.assertIsNone(e.gpus_per_node)
        self.assertEqual((e.rank, e.local_rank, e.world_size, e.local_world_size, e.nodes), (0, 0, 1, 1, 1))

    def test_full(self):
        e = tern_train.env(
            {
                "TERN_JOB": "bert",
                "TERN_PROGRESS_FILE": "/run/tern/progress.json",
                "TERN_INCARNATION": "3",
                "TERN_INSTANCE": "i-0abc",
                "TERN_CHECKPOINT_SIGNAL": "SIGUSR1",
                "TERN_STOP_GRACE_SECONDS": "45.5",
                "TERN_STOP_FILE": "/run/tern/stop.json",
                "TERN_ACCELERATOR": "A100",
                "TERN_GPUS_PER_NODE": "8",
                "RANK": "9",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "16",
                "LOCAL_WORLD_SIZE": "8",
            }
        )
        self.assertEqual(e.job, "bert")
        self.assertEqual(e.incarnation, 3)
        self.assertEqual(e.instance, "i-0abc")
        self.assertEqual(e.checkpoint_signal, signal.SIGUSR1)
        self.assertEqual(e.stop_grace_seconds, 45.5)
        self.assertEqual(e.accelerator, "A100")
        self.assertEqual(e.gpus_per_node, 8)
        self.assertEqual((e.rank, e.local_rank, e.world_size, e.local_world_size, e.nodes), (9, 1, 16, 8, 2))
        self.assertFalse(e.is_local_zero)

    def test_empty_strings_are_unset_and_local_world_size_defaults_to_world_size(self):
        e = tern_train.env({"TERN_INCARNATION": "", "TERN_CHECKPOINT_SIGNAL": " ", "WORLD_SIZE": "4"})
        self.assertIsNone(e.incarnation)
        self.assertEqual(e.checkpoint_signal, signal.SIGTERM)
        self.assertEqual((e.local_world_size, e.nodes), (4, 1))

    def test_reads_os_environ_by_default(self):
        with mock.patch.dict(os.environ, {"TERN_JOB": "from-os", "TERN_INCARNATION": "7"}):
            e = tern_train.env()
        self.assertEqual((e.job, e.incarnation), ("from-os", 7))

    def test_signal_spellings(self):
        for text in ("SIGUSR1", "sigusr1", "USR1", str(int(signal.SIGUSR1))):
            self.assertEqual(tern_train.parse_signal(text), signal.SIGUSR1, text)

    def test_bad_values_name_the_variable(self):
        cases = [
            ("TERN_INCARNATION", "two"),
            ("TERN_INCARNATION", "-1"),
            ("TERN_STOP_GRACE_SECONDS", "soon"),
            ("TERN_STOP_GRACE_SECONDS", "-3"),
            ("TERN_STOP_GRACE_SECONDS", "inf"),
            ("TERN_CHECKPOINT_SIGNAL", "SIGNOPE"),
            ("TERN_CHECKPOINT_SIGNAL", "SIGKILL"),
            ("TERN_CHECKPOINT_SIGNAL", "SIG_DFL"),
            ("TERN_GPUS_PER_NODE", "0"),
            ("TERN_GPUS_PER_NODE", "1.5"),
            ("WORLD_SIZE", "0"),
            ("LOCAL_RANK", "-1"),
            ("LOCAL_WORLD_SIZE", "x"),
            ("RANK", "a"),
        ]
        for name, value in cases:
            with self.subTest(name=name, value=value):
                with self.assertRaises(ValueError) as ctx:
                    tern_train.env({name: value})
                self.assertIn(name, str(ctx.exception))
        with self.assertRaises(ValueError) as ctx:
            tern_train.env({"RANK": "2", "WORLD_SIZE": "2"})
        self.assertIn("RANK", str(ctx.exception))

    def test_run_propagates_env_errors(self):
        with mock.patch.dict(os.environ, {"TERN_CHECKPOINT_SIGNAL": "bogus"}):
            with self.assertRaises(ValueError):
                tern_train.Run(handle_signal=False)


class RunCountingTest(TempDirTest):
    def test_resume_start_and_default_step_samples(self):
        run = self.make_run({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, samples=100, local_batch=8)
        self.assertEqual((run.samples, run.checkpoint_samples), (100.0, 100.0))
        with run.step():
            pass
        self.assertEqual(run.samples, 132.0)  # 8 per rank * 4 ranks
        with run.step(samples=5):
            pass
        run.step_done(3)
        self.assertEqual(run.samples, 140.0)
        self.assertEqual(run.steps, 3)
        self.assertEqual(run.checkpoint_samples, 100.0)

    def test_step_needs_a_count(self):
        run = self.make_run()
        with self.assertRaises(ValueError):
            with run.step():
                self.fail("body must not run")
        for bad in (-1, float("nan"), "x", True):
            with self.assertRaises(ValueError):
                run.step_done(bad)

    def test_failed_step_is_not_counted(self):
        run = self.make_run(local_batch=2)
        with self.assertRaises(RuntimeError):
            with run.step():
                raise RuntimeError("oom")
        self.assertEqual((run.samples, run.steps), (0.0, 0))

    def test_bad_arguments(self):
        for kwargs in ({"samples": -1}, {"local_batch": 0}, {"local_batch": 2.5}, {"interval": -1}):
            with self.subTest(**kwargs):
                with self.assertRaises(ValueError):
                    self.make_run(**kwargs)

    def test_writes_are_throttled_but_checkpoints_are_not(self):
        target = self.path("progress.json")
        clock = FakeClock()
        with mock.patch.object(run_module, "time", clock):
            run = self.make_run({"TERN_PROGRESS_FILE": target}, local_batch=4, interval=10.0)
            run.step_done()  # first step: written at once
            self.assertEqual(read_json(target)["samples"], 4.0)
            clock.now += 3
            run.step_done()
            self.assertEqual(read_json(target)["samples"], 4.0)  # within the interval
            clock.now += 3
            run.checkpointed()  # always written
            self.assertEqual(read_json(target), {"samples": 8.0, "checkpoint_samples": 8.0})
            clock.now += 3
            run.step_done()
            self.assertEqual(read_json(target)["samples"], 8.0)
            clock.now += 11
            run.step_done()
            self.assertEqual(read_json(target)["samples"], 16.0)
            run.step_done()
            run.close()  # final write
        self.assertEqual(read_json(target), {"samples": 20.0, "checkpoint_samples": 8.0})

    def test_checkpointed_explicit_samples(self):
        target = self.path("p.json")
        run = self.make_run({"TERN_PROGRESS_FILE": target}, local_batch=10)
        for _ in range(3):
            run.step_done()
        run.checkpointed(20)
        self.assertEqual(read_json(target)["checkpoint_samples"], 20.0)
        with self.assertRaises(ValueError):
            run.checkpointed(31)

    def test_step_timing_skips_warmup_and_uses_median_of_last_20(self):
        clock = FakeClock()
        with mock.patch.object(run_module, "time", clock):
            run = self.make_run(local_batch=1)
            for dt in (50.0, 40.0):  # warm-up steps: slow and ignored
                clock.now += dt
                run.step_done()
            self.assertIsNone(run.step_seconds)
            clock.now += 2.0
            run.step_done()
            self.assertEqual(run.step_seconds, 2.0)
            for i in range(30):
                clock.now += 1.0 if i % 3 else 9.0
                run.step_done()
            # The last 20 intervals hold 6 nines and 14 ones: the median is 1.
            self.assertEqual(run.step_seconds, 1.0)

    def test_observation_fields(self):
        target = self.path("p.json")
        environ = {
            "TERN_PROGRESS_FILE": target,
            "TERN_INCARNATION": "2",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "RANK": "4",
            "TERN_ACCELERATOR": "V100",
        }
        clock = FakeClock()
        with mock.patch.object(run_module, "time", clock):
            run = self.make_run(environ, local_batch=16)
            for _ in range(3):
                clock.now += 0.5
                run.step_done()
            run.write()
        self.assertEqual(
            read_json(target),
            {
                "samples": 384.0,
                "checkpoint_samples": 0.0,
                "incarnation": 2,
                "step_seconds": 0.5,
                "accelerator": "V100",
                "gpus": 8,
                "nodes": 2,
                "local_batch": 16,
            },
        )
        # The accelerator argument wins over TERN_ACCELERATOR.
        self.assertEqual(self.make_run(environ, local_batch=1, accelerator="H100").accelerator, "H100")

    def test_observation_omitted_when_unknown(self):
        clock = FakeClock()
        with mock.patch.object(run_module, "time", clock):
            no_accel = self.make_run({}, local_batch=4)
            no_batch = self.make_run({"TERN_ACCELERATOR": "A100"})
            for _ in range(4):
                clock.now += 1
                no_accel.step_done()
                no_batch.step_done(4)
        self.assertEqual(set(no_accel.progress()), {"samples", "checkpoint_samples"})
        self.assertEqual(set(no_batch.progress()), {"samples", "checkpoint_samples"})

    def test_progress_file_env_wins_over_argument(self):
        env_path, arg_path = self.path("env.json"), self.path("arg.json")
        self.assertEqual(self.make_run({}, progress_file=arg_path).progress_file, arg_path)
        run = self.make_run({"TERN_PROGRESS_FILE": env_path}, progress_file=arg_path)
        self.assertEqual(run.progress_file, env_path)
        self.assertFalse(self.make_run({}).write())  # no file at all: nothing to do

    def test_only_local_rank_zero_writes(self):
        target = self.path("p.json")
        environ = {"TERN_PROGRESS_FILE": target, "LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "2"}
        run = self.make_run(environ, local_batch=2)
        self.assertFalse(run.writes_progress)
        with run.step():
            pass
        run.checkpointed()
        self.assertFalse(run.write())
        run.close()
        self.assertEqual(run.samples, 4.0)
        self.assertEqual(os.listdir(self.dir), [])

    def test_unwritable_progress_file_warns_instead_of_failing(self):
        blocker = self.path("file")
        with open(blocker, "w"):
            pass
        run = self.make_run({"TERN_PROGRESS_FILE": os.path.join(blocker, "p.json")}, local_batch=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run.step_done()
            self.assertEqual(run.samples, 1.0)
            with self.assertRaises(OSError):
                run.write()  # the explicit call reports the error
            run.close()
        self.assertTrue(any("progress" in str(w.message) for w in caught))


class RunSignalTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.stop_file = self.path("stop.json")
        self.environ = {
            "TERN_CHECKPOINT_SIGNAL": "SIGUSR1",
            "TERN_STOP_FILE": self.stop_file,
            "TERN_STOP_GRACE_SECONDS": "12",
        }
        self.original = signal.getsignal(signal.SIGUSR1)
        self.addCleanup(signal.signal, signal.SIGUSR1, self.original)

    def signal_run(self, environ=None, **kwargs):
        run = tern_train.Run(settings=tern_train.env(environ or self.environ), **kwargs)
        self.addCleanup(run.close)
        return run

    def deliver(self, run, sig=signal.SIGUSR1):
        os.kill(os.getpid(), sig)
        deadline = time.monotonic() + 5
        while not run.stop_requested and time.monotonic() < deadline:
            time.sleep(0.001)  # Python runs the handler between bytecodes of the main thread

    def test_signal_sets_stop_with_grace_deadline(self):
        run = self.signal_run()
        self.assertFalse(run.should_stop())
        before = time.time()
        self.deliver(run)
        after = time.time()
        self.assertTrue(run.stop_requested)
        self.assertEqual(run.stop_reason, "signal")
        self.assertGreaterEqual(run.save_by, before + 12)
        self.assertLessEqual(run.save_by, after + 12)
        self.assertTrue(run.should_stop())
        self.assertTrue(run.should_stop())  # sticky

    def test_default_grace_is_30_seconds(self):
        run = self.signal_run({"TERN_CHECKPOINT_SIGNAL": "SIGUSR1"})
        before = time.time()
        self.deliver(run)
        self.assertAlmostEqual(run.save_by, before + 30, delta=2)

    def test_stop_file_gives_reason_and_deadline(self):
        with open(self.stop_file, "w") as f:
            json.dump({"reason": "notice", "save_by_unix": 1893456000.25}, f)
        run = self.signal_run()
        self.deliver(run)
        self.assertEqual((run.stop_reason, run.save_by), ("notice", 1893456000.25))

    def test_unreadable_stop_file_falls_back_to_grace(self):
        with open(self.stop_file, "w") as f:
            f.write("{not json")
        run = self.signal_run()
        before = time.time()
        self.deliver(run)
        self.assertEqual(run.stop_reason, "signal")
        self.assertAlmostEqual(run.save_by, before + 12, delta=2)

    def test_other_signal_is_not_handled(self):
        run = self.signal_run()
        self.assertEqual(run.checkpoint_signal, signal.SIGUSR1)
        self.assertNotEqual(signal.getsignal(signal.SIGTERM), run._on_signal)

    def test_close_restores_previous_handler(self):
        calls = []

        def previous(signum, frame):
            calls.append(signum)

        signal.signal(signal.SIGUSR1, previous)
        run = self.signal_run()
        self.assertEqual(signal.getsignal(signal.SIGUSR1), run._on_signal)
        self.deliver(run)
        self.assertEqual(calls, [])  # replaced, not chained
        run.close()
        self.assertIs(signal.getsignal(signal.SIGUSR1), previous)
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.001)
        self.assertEqual(calls, [signal.SIGUSR1])

    def test_handle_signal_false_and_request_stop(self):
        before = signal.getsignal(signal.SIGUSR1)
        run = self.signal_run(handle_signal=False)
        self.assertIs(signal.getsignal(signal.SIGUSR1), before)
        run.request_stop("drain", save_by=2000000000.0)
        run.request_stop("cancel", save_by=2100000000.0)  # a later deadline does not extend
        self.assertEqual((run.stop_reason, run.save_by), ("cancel", 2000000000.0))
        self.assertTrue(run.should_stop())

    def test_no_handler_outside_main_thread(self):
        before = signal.getsignal(signal.SIGUSR1)
        result = {}

        def make():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result["run"] = tern_train.Run(settings=tern_train.env(self.environ))
                result["warnings"] = [str(w.message) for w in caught]

        t = threading.Thread(target=make)
        t.start()
        t.join()
        self.assertIs(signal.getsignal(signal.SIGUSR1), before)
        self.assertTrue(any("main thread" in w for w in result["warnings"]))
        result["run"].close()

    def test_should_stop_ignores_uninitialised_distributed(self):
        fake = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: False)
        run = self.signal_run(handle_signal=False)
        with mock.patch.dict(sys.modules, {"torch.distributed": fake}):
            self.assertFalse(run.should_stop())
            run.request_stop()
            self.assertTrue(run.should_stop())


class ImportTest(unittest.TestCase):
    def test_import_without_torch(self):
        code = (
            "import sys\n"
            "sys.modules['torch'] = None  # any 'import torch' now fails\n"
            "import tern_train, tern_train._run\n"
            "r = tern_train.Run(local_batch=2, handle_signal=False)\n"
            "with r.step():\n"
            "    pass\n"
            "assert r.should_stop() is False\n"
            "print('ok', r.samples)\n"
        )
        environ = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
        for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TERN_PROGRESS_FILE"):
            environ.pop(key, None)
        out = subprocess.run(
            [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=30
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "ok 2.0")


if __name__ == "__main__":
    unittest.main()
