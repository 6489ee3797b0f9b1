"""Lightning integration: :class:`TernCallback`.

Importing this module needs ``lightning`` (``lightning.pytorch``) or the older
standalone ``pytorch_lightning`` package.

How Lightning 2.6 treats SIGTERM, and why this callback takes the signal over
---------------------------------------------------------------------------
(read from ``lightning/pytorch/trainer/connectors/signal_connector.py`` and
the loops of Lightning 2.6):

* ``Trainer._run`` calls ``_SignalConnector.register_signal_handlers()`` right
  before ``_run_stage`` -- after ``setup``, checkpoint restore and
  ``on_fit_start``.  It installs a SIGTERM handler that composes its own
  ``_sigterm_notifier_fn`` with whatever handler was there before.
* ``_sigterm_notifier_fn`` forwards the signal to the child processes of
  Lightning's own launcher (``launcher.kill(signum)``), runs a
  ``dist.broadcast`` *inside the signal handler* when a process group with
  more than one rank exists, and sets ``trainer.received_sigterm``.
* The loops then raise ``SIGTERMException`` (a ``SystemExit`` subclass, so the
  process exits with status 0): in ``_TrainingEpochLoop.on_advance_end`` right
  after the current batch's ``on_train_batch_end`` hooks, at the start of the
  next batch on every rank through ``_broadcast_sigterm_tensor`` (world size
  > 1), in ``_FitLoop.on_advance_end`` and mid-evaluation.  Nothing is saved:
  ``trainer.fit`` does not return, the code after it never runs, and the
  ``on_exception`` hooks see the exception after the process group may already
  be out of step between ranks.

So relying on Lightning's handler would mean saving from inside that exit path
with ranks raising at different points (rank 0 after its batch end, the other
ranks at their next broadcast), a collective inside a signal handler, and an
exit status of 0 that the agent would read as "checkpoint durable" even when
nothing was saved.  Instead this callback re-installs its own handler for the
checkpoint signal in ``on_sanity_check_start`` and ``on_train_start`` (both run
after Lightning registered its handler), so ``trainer.received_sigterm``
stays False and Lightning's exit path is never taken.  At every training batch
end all ranks agree on the stop flag (one tiny all_reduce), save the
checkpoint with ``trainer.save_checkpoint`` (which ends in a barrier), report
``checkpoint_samples``, and set ``trainer.should_stop = True``; ``fit`` then
returns normally.  Lightning's teardown restores the handlers it saved (ours),
and our ``teardown`` restores the handler that was there before ``fit``.

Notes: when stopping through ``should_stop`` Lightning may still run one
validation pass (and ``on_train_epoch_end`` checkpoints of other callbacks);
the checkpoint is already saved and reported before that, so this only delays
the exit.  ``min_epochs``/``min_steps`` that are not yet met make Lightning
ignore ``should_stop``; the checkpoint is then still saved once, but the run
continues until the agent kills it.  Writing relies on Lightning's
``_atomic_save`` (for local paths: write to a temporary file, then rename).
"""

import dataclasses
import os
import signal
from typing import Any, Mapping, Optional

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package of Lightning < 2
    import pytorch_lightning as pl  # type: ignore[no-redef]

import torch

from ._env import env as _read_env
from ._run import Run

__all__ = ["TernCallback"]

#: Key of the entry this callback adds to Lightning checkpoints.
CHECKPOINT_KEY = "tern"


class TernCallback(pl.Callback):
    """Reports progress to ``tern agent`` and saves on its checkpoint signal.

    ``ckpt_path``: file the stop (and periodic) checkpoint is written to; pass
    the same path to ``trainer.fit(..., ckpt_path=...)`` to resume.
    ``local_batch``: samples per training batch on one process; when None the
    length of each batch is used.  Global samples per batch are the local
    count times the world size.  ``every_n_steps``: also save to ``ckpt_path``
    every that many optimizer steps (``trainer.global_step``).
    ``save_on_train_end``: also save when training ends normally (e.g. at
    ``max_steps``) with samples not yet in a checkpoint.  ``accelerator``,
    ``progress_file`` and ``interval`` are passed to :class:`tern_train.Run`.

    The :class:`tern_train.Run` is available as :attr:`run` from ``setup`` on.
    The samples count is stored in each checkpoint under ``"tern"`` and
    restored from it when resuming.
    """

    def __init__(
        self,
        ckpt_path: str,
        local_batch: Optional[int] = None,
        every_n_steps: Optional[int] = None,
        *,
        accelerator: Optional[str] = None,
        progress_file: Optional[str] = None,
        interval: float = 1.0,
        save_on_train_end: bool = False,
    ) -> None:
        super().__init__()
        if every_n_steps is not None and (isinstance(every_n_steps, bool) or int(every_n_steps) < 1):
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps!r}")
        if local_batch is not None and (isinstance(local_batch, bool) or int(local_batch) < 1):
            raise ValueError(f"local_batch must be >= 1, got {local_batch!r}")
        self.ckpt_path = os.fspath(ckpt_path)
        self.local_batch = None if local_batch is None else int(local_batch)
        self.every_n_steps = None if every_n_steps is None else int(every_n_steps)
        self.accelerator = accelerator
        self.progress_file = progress_file
        self.interval = interval
        self.save_on_train_end = bool(save_on_train_end)
        self.run: Optional[Run] = None
        self._last_saved_step: Optional[int] = None
        self._stop_saved = False
        self._world_size = 1

    # ----------------------------------------------------------- life cycle

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if stage != "fit" or self.run is not None:
            return
        # Lightning knows the ranks even when it launched the processes itself
        # (then RANK/WORLD_SIZE may be missing from the environment of rank 0).
        base = _read_env()
        world_size = max(1, int(trainer.world_size))
        num_nodes = max(1, int(getattr(trainer, "num_nodes", 1) or 1))
        settings = dataclasses.replace(
            base,
            rank=int(trainer.global_rank),
            local_rank=int(trainer.local_rank),
            world_size=world_size,
            local_world_size=max(1, world_size // num_nodes),
        )
        self._world_size = world_size
        self.run = Run(
            samples=0.0,
            local_batch=self.local_batch,
            accelerator=self.accelerator,
            progress_file=self.progress_file,
            interval=self.interval,
            settings=settings,
        )
        self._last_saved_step = None
        self._stop_saved = False

    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if stage != "fit" or self.run is None:
            return
        self.run.close()
        self.run = None

    def on_exception(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", exception: BaseException) -> None:
        # Lightning skips the callbacks' teardown when fit fails: close here.
        if self.run is not None:
            self.run.close()
            self.run = None

    def _take_over_signal(self) -> None:
        # Lightning installed its SIGTERM handler after our setup(); put ours
        # back on top (see the module docstring).
        run = self.run
        if run is not None and run._handler_installed:
            if signal.getsignal(run.checkpoint_signal) != run._on_signal:
                signal.signal(run.checkpoint_signal, run._on_signal)

    def on_sanity_check_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._take_over_signal()

    def on_train_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._take_over_signal()
        if self.run is not None:
            self.run._write_quietly()  # report the (possibly restored) count at once

    # ------------------------------------------------------------- batches

    def on_train_batch_end(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        run = self.run
        if run is None:
            return
        if self.local_batch is not None:
            count = float(self.local_batch * self._world_size)
        else:
            count = float(_batch_length(batch) * self._world_size)
        run.step_done(count)

        step = int(trainer.global_step)
        if (
            self.every_n_steps is not None
            and step > 0
            and step % self.every_n_steps == 0
            and step != self._last_saved_step
        ):
            self.save(trainer)

        # A collective: every rank reaches this at every batch end.
        if run.should_stop() and not self._stop_saved:
            if run.checkpoint_samples < run.samples:  # unless just saved by every_n_steps
                self.save(trainer)
            self._stop_saved = True
            trainer.should_stop = True

    def on_train_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        run = self.run
        if self.save_on_train_end and run is not None and run.checkpoint_samples < run.samples:
            self.save(trainer)

    def save(self, trainer: "pl.Trainer") -> None:
        """Save ``ckpt_path`` now and report it as durable.

        Must be called on every rank at the same point (it ends in a barrier).
        """
        run = self.run
        if run is None:
            raise RuntimeError("TernCallback.save() called outside trainer.fit()")
        samples = run.samples
        # Every rank calls it (distributed strategies need that); the file is
        # written by global rank 0 and the call ends with a barrier, so the
        # checkpoint is complete on every rank when it returns.
        trainer.save_checkpoint(self.ckpt_path)
        self._last_saved_step = int(trainer.global_step)
        run.checkpointed(samples)

    # ---------------------------------------------------------- checkpoint

    def on_save_checkpoint(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict
    ) -> None:
        if self.run is not None:
            checkpoint[CHECKPOINT_KEY] = {"samples": float(self.run.samples)}

    def on_load_checkpoint(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict
    ) -> None:
        state = checkpoint.get(CHECKPOINT_KEY)
        if self.run is None or not isinstance(state, dict) or "samples" not in state:
            return
        samples = float(state["samples"])
        self.run.samples = samples
        self.run.checkpoint_samples = samples


def _batch_length(batch: Any) -> int:
    """Number of samples in a batch, guessed from its structure.

    A tensor: its first dimension.  A mapping: the length of its first value.
    A list or tuple whose first item is a tensor or mapping (what the default
    collate function makes of ``(x, y)`` samples): the length of that item.
    Anything else with a length (e.g. a list of strings): that length.
    Pass ``local_batch`` to the callback when this guess is wrong.
    """
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if isinstance(batch, Mapping):
        for value in batch.values():
            return _batch_length(value)
        return 0
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], (torch.Tensor, Mapping)):
        return _batch_length(batch[0])
    try:
        return len(batch)
    except TypeError:
        raise ValueError(
            "TernCallback cannot tell the number of samples in this batch; pass local_batch="
        ) from None
