"""tern_train: the training side of the ``tern agent`` contract.

Importing this package needs only the standard library; the Lightning
integration lives in :mod:`tern_train.lightning` and is imported on demand.

Typical use in a PyTorch loop::

    run = tern_train.Run(samples=resumed_samples, local_batch=batch)
    while not done:
        with run.step():
            train_one_batch()
        if run.should_stop():          # same answer on every rank
            save_checkpoint(run.samples)
            run.checkpointed()
            break
    run.close()
"""

from ._env import Env, env, parse_signal
from ._progress import write_progress
from ._run import Run

__all__ = ["Env", "env", "parse_signal", "write_progress", "Run", "__version__"]

__version__ = "0.1.0"
