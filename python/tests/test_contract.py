"""The helper against the agent's contract, read from one place: ``contract.json``.

That file is the agent's own description of what it gives the training (the Rust test
``agent::contract::tests::the_python_helpers_contract_is_this_one`` keeps it equal to the
agent's code): the variables it sets, the stop file it writes, the progress file it reads.
A variable, a stop reason or a progress field the helper does not handle fails here.
"""

import dataclasses
import json
import os
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)

import tern_train  # noqa: E402
from test_core import TempDirTest  # noqa: E402

with open(os.path.join(HERE, "contract.json"), encoding="utf-8") as _f:
    CONTRACT = json.load(_f)

# The helper's own variables: torchrun's rank settings, not the agent's.
TORCHRUN_RANKS = {"rank", "local_rank", "world_size", "local_world_size"}


def tern_variables():
    return {v["name"]: v["value"] for v in CONTRACT["env"] if v["read_by"] == "tern_train"}


def attribute(name):
    """TERN_STOP_GRACE_SECONDS -> stop_grace_seconds."""
    return name[len("TERN_"):].lower()


class EnvContractTest(unittest.TestCase):
    def test_every_variable_the_agent_sets_for_the_helper_is_a_field_of_env(self):
        fields = {f.name for f in dataclasses.fields(tern_train.Env)} - TORCHRUN_RANKS
        self.assertEqual({attribute(n) for n in tern_variables()}, fields)

    def test_every_value_the_agent_sets_is_parsed_as_given(self):
        parsed = tern_train.env(tern_variables())
        for name, value in tern_variables().items():
            got = getattr(parsed, attribute(name))
            if isinstance(got, signal.Signals):
                got = got.name
            if isinstance(got, (int, float)):
                self.assertEqual(got, float(value), name)
            else:
                self.assertEqual(got, value, name)

    def test_the_launcher_and_skypilot_variables_are_not_the_helpers(self):
        others = [v["name"] for v in CONTRACT["env"] if v["read_by"] != "tern_train"]
        self.assertTrue(others)
        self.assertFalse(any(n.startswith("TERN_") for n in others), others)


class StopFileContractTest(TempDirTest):
    def test_every_reason_the_agent_writes_reaches_the_run_with_its_deadline(self):
        example = CONTRACT["stop_file"]["example"]
        stop_file = self.path("progress.json.stop")
        environ = {"TERN_CHECKPOINT_SIGNAL": "SIGUSR1", "TERN_STOP_FILE": stop_file}
        original = signal.getsignal(signal.SIGUSR1)
        self.addCleanup(signal.signal, signal.SIGUSR1, original)
        self.assertEqual(len(CONTRACT["stop_file"]["reasons"]), 6)
        for reason in CONTRACT["stop_file"]["reasons"]:
            with open(stop_file, "w", encoding="utf-8") as f:
                json.dump(dict(example, reason=reason), f)
            run = tern_train.Run(settings=tern_train.env(environ))
            try:
                os.kill(os.getpid(), signal.SIGUSR1)
                deadline = time.monotonic() + 5
                while not run.stop_requested and time.monotonic() < deadline:
                    time.sleep(0.001)
                self.assertEqual((run.stop_reason, run.save_by), (reason, example["save_by_unix"]))
            finally:
                run.close()


class ProgressFileContractTest(TempDirTest):
    def test_what_the_run_writes_is_what_the_agent_reads(self):
        progress = CONTRACT["progress_file"]
        fields = set(progress["example"])
        target = self.path("progress.json")
        environ = {
            "TERN_PROGRESS_FILE": target,
            "TERN_INCARNATION": "3",
            "TERN_ACCELERATOR": "A100",
            "WORLD_SIZE": "16",
            "LOCAL_WORLD_SIZE": "8",
        }
        run = self.make_run(environ, local_batch=32)
        for _ in range(4):
            run.step_done()
        run.checkpointed()
        run.write()
        with open(target, encoding="utf-8") as f:
            written = json.load(f)
        self.assertLessEqual(set(written), fields, "a field the agent would ignore")
        self.assertLessEqual(set(progress["required"]), set(written))
        if "step_seconds" in written:
            self.assertLessEqual(set(progress["required_with_step_seconds"]), set(written))
        # The helper writes every field the agent reads once it has timed steps.
        self.assertEqual(set(written), fields)


if __name__ == "__main__":
    unittest.main()
