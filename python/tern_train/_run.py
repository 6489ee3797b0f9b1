"""The :class:`Run` helper: sample counting, step timing, progress reporting and
the checkpoint-signal protocol of ``tern agent``.

Standard library only at import time.  ``torch`` is used by
:meth:`Run.should_stop` only when the training script has already imported and
initialised ``torch.distributed`` itself (looked up in ``sys.modules``).
"""

import json
import math
import signal
import statistics
import sys
import threading
import time
import warnings
from collections import deque
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional, Tuple

from ._env import Env, env as _read_env
from ._progress import write_progress

__all__ = ["Run"]

#: Deadline used when neither the stop file nor TERN_STOP_GRACE_SECONDS says otherwise.
DEFAULT_GRACE_SECONDS = 30.0
#: Number of measured steps whose median is reported as ``step_seconds``.
TIMING_WINDOW = 20
#: Steps at the start of a run that are not timed (compilation, allocator warm-up...).
WARMUP_STEPS = 2


class Run:
    """Bookkeeping for one training process, following the tern agent contract.

    ``samples`` is where the run starts: when resuming from a checkpoint that
    covered N samples, pass N, and both :attr:`samples` and
    :attr:`checkpoint_samples` start at N.

    The progress file is ``TERN_PROGRESS_FILE`` when set, else the
    ``progress_file`` argument, else none.  Only the process with LOCAL_RANK 0
    writes it.  ``interval`` is the minimum number of seconds between the
    writes that :meth:`step` makes (:meth:`checkpointed`, :meth:`write` and
    :meth:`close` always write).

    With ``handle_signal`` (the default) a handler for the checkpoint signal
    (``TERN_CHECKPOINT_SIGNAL``, default SIGTERM) replaces the current one; it
    only records the request (:attr:`stop_requested`, :attr:`stop_reason`,
    :attr:`save_by`), the training loop decides when to act on it through
    :meth:`should_stop`.  :meth:`close` puts the previous handler back.
    Handlers can only be installed from the main thread; elsewhere none is
    installed and :meth:`request_stop` is the way to stop.

    ``settings`` (keyword only) replaces the parsed environment, e.g. to use
    ranks that a framework knows better than the environment does.
    """

    def __init__(
        self,
        samples: float = 0.0,
        local_batch: Optional[int] = None,
        accelerator: Optional[str] = None,
        progress_file: Optional[str] = None,
        interval: float = 1.0,
        handle_signal: bool = True,
        *,
        settings: Optional[Env] = None,
    ) -> None:
        self.env: Env = settings if settings is not None else _read_env()
        start = _check_count(samples, "samples")
        if local_batch is not None:
            if isinstance(local_batch, bool) or not isinstance(local_batch, int) or local_batch < 1:
                raise ValueError(f"local_batch must be an integer >= 1, got {local_batch!r}")
        interval = float(interval)
        if not math.isfinite(interval) or interval < 0:
            raise ValueError(f"interval must be a finite number >= 0, got {interval!r}")

        self.samples: float = start
        self.checkpoint_samples: float = start
        self.local_batch: Optional[int] = local_batch
        self.accelerator: Optional[str] = accelerator or self.env.accelerator
        self.progress_file: Optional[str] = self.env.progress_file or progress_file
        self.interval: float = interval

        self.stop_requested: bool = False
        self.stop_reason: Optional[str] = None
        self.save_by: Optional[float] = None

        self._stop_agreed = False
        self._durations: "deque[float]" = deque(maxlen=TIMING_WINDOW)
        self._steps = 0
        self._last_step_end: Optional[float] = None
        self._last_write: Optional[float] = None
        self._handler_installed = False
        self._previous_handler: Any = None
        self._closed = False

        if handle_signal:
            self._install_handler()

    # ------------------------------------------------------------------ signal

    @property
    def checkpoint_signal(self) -> signal.Signals:
        """The signal the agent sends when the checkpoint must be saved."""
        return self.env.checkpoint_signal

    def _install_handler(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            warnings.warn(
                "tern_train.Run created outside the main thread: no handler for "
                f"{self.checkpoint_signal.name} installed; call run.request_stop() yourself",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        self._previous_handler = signal.signal(self.checkpoint_signal, self._on_signal)
        self._handler_installed = True

    def _on_signal(self, signum: int, frame: Any) -> None:
        reason, save_by = self._read_stop_file()
        self.request_stop(reason or "signal", save_by)

    def _read_stop_file(self) -> Tuple[Optional[str], Optional[float]]:
        """Reason and deadline from TERN_STOP_FILE; (None, None) if absent or unreadable."""
        path = self.env.stop_file
        if not path:
            return None, None
        try:
            with open(path, "r", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None, None
        if not isinstance(data, dict):
            return None, None
        reason = data.get("reason")
        reason = reason if isinstance(reason, str) and reason else None
        save_by = data.get("save_by_unix")
        if isinstance(save_by, bool) or not isinstance(save_by, (int, float)) or not math.isfinite(save_by):
            save_by = None
        return reason, (float(save_by) if save_by is not None else None)

    def request_stop(self, reason: str = "manual", save_by: Optional[float] = None) -> None:
        """Record a stop request, as the checkpoint signal does.

        ``save_by`` is a unix time; when omitted the deadline is now plus
        TERN_STOP_GRACE_SECONDS (30 s when unset).  A later request may bring
        the deadline forward but never pushes it back.
        """
        if save_by is None:
            grace = self.env.stop_grace_seconds
            save_by = time.time() + (DEFAULT_GRACE_SECONDS if grace is None else grace)
        self.stop_requested = True
        self.stop_reason = reason
        self.save_by = save_by if self.save_by is None else min(self.save_by, save_by)

    def should_stop(self) -> bool:
        """Whether the training should checkpoint and exit now.

        Locally this is :attr:`stop_requested`.  When ``torch.distributed`` is
        imported and initialised with more than one process, the flag is
        combined over all ranks with an all_reduce(MAX), so every rank returns
        the same answer at the same step -- which also means every rank must
        call this at the same point of every step (it is a collective).  Once
        True it stays True, without further collectives.
        """
        if self._stop_agreed:
            return True
        flag = self.stop_requested
        dist = _initialized_distributed()
        if dist is not None:
            flag = _all_ranks_any(dist, flag)
        if flag:
            self._stop_agreed = True
            if not self.stop_requested:
                self.stop_reason = "peer"  # another rank received the signal
        return flag

    # ------------------------------------------------------------------- steps

    @property
    def step_seconds(self) -> Optional[float]:
        """Median wall time of the last 20 measured steps, or None before any."""
        if not self._durations:
            return None
        return float(statistics.median(self._durations))

    @property
    def steps(self) -> int:
        """Number of steps finished by this process since the Run was created."""
        return self._steps

    @contextmanager
    def step(self, samples: Optional[float] = None) -> Iterator["Run"]:
        """Context manager around one training step.

        On normal exit, adds ``samples`` (default ``local_batch * WORLD_SIZE``,
        the samples processed by all workers) to :attr:`samples`, records the
        step time and writes the progress file if ``interval`` has elapsed.
        Nothing is counted when the body raises.
        """
        count = self._step_samples(samples)  # fail before the step, not after it
        yield self
        self._finish_step(count)

    def step_done(self, samples: Optional[float] = None) -> None:
        """The same bookkeeping as leaving :meth:`step`, for loops driven by hooks."""
        self._finish_step(self._step_samples(samples))

    def _step_samples(self, samples: Optional[float]) -> float:
        if samples is None:
            if self.local_batch is None:
                raise ValueError("step samples unknown: pass samples= or create the Run with local_batch=")
            return float(self.local_batch * self.env.world_size)
        return _check_count(samples, "samples")

    def _finish_step(self, count: float) -> None:
        now = time.monotonic()
        self._steps += 1
        # Times are measured between consecutive step ends, so the interval
        # includes data loading and anything else the loop does per step.
        if self._steps > WARMUP_STEPS and self._last_step_end is not None:
            self._durations.append(now - self._last_step_end)
        self._last_step_end = now
        self.samples += count
        if self._last_write is None or now - self._last_write >= self.interval:
            self._write_quietly()

    # -------------------------------------------------------------- reporting

    def checkpointed(self, samples: Optional[float] = None) -> None:
        """Declare the checkpoint covering ``samples`` (default: all so far) durable.

        Call it only once the checkpoint is completely written (on every rank,
        after a barrier, in a distributed job).  Writes the progress file now.
        """
        value = self.samples if samples is None else _check_count(samples, "samples")
        if value > self.samples:
            raise ValueError(f"checkpointed samples {value} exceed the samples processed ({self.samples})")
        self.checkpoint_samples = value
        self._write_quietly()

    @property
    def writes_progress(self) -> bool:
        """True when this process writes a progress file (a path is known and LOCAL_RANK is 0)."""
        return self.progress_file is not None and self.env.is_local_zero

    def progress(self) -> Dict[str, Any]:
        """The object that :meth:`write` puts in the progress file."""
        data: Dict[str, Any] = {
            "samples": float(self.samples),
            "checkpoint_samples": float(min(self.checkpoint_samples, self.samples)),
        }
        if self.env.incarnation is not None:
            data["incarnation"] = self.env.incarnation
        step_seconds = self.step_seconds
        # The observation fields only make sense together; omit all of them
        # while any is unknown.
        if step_seconds is not None and step_seconds > 0 and self.accelerator and self.local_batch:
            data["step_seconds"] = step_seconds
            data["accelerator"] = self.accelerator
            data["gpus"] = self.env.world_size
            data["nodes"] = self.env.nodes
            data["local_batch"] = self.local_batch
        return data

    def write(self) -> bool:
        """Write the progress file now; returns False when this process writes none."""
        if not self.writes_progress:
            return False
        assert self.progress_file is not None
        write_progress(self.progress_file, self.progress())
        self._last_write = time.monotonic()
        return True

    def _write_quietly(self) -> None:
        # A full disk or a vanished directory must not kill a training run;
        # the next write will try again.
        try:
            self.write()
        except (OSError, ValueError, TypeError) as err:
            warnings.warn(f"tern_train: cannot write progress file {self.progress_file}: {err}", RuntimeWarning)

    # ----------------------------------------------------------------- closing

    def close(self) -> None:
        """Write the progress file a last time and restore the previous signal handler."""
        if self._closed:
            return
        self._closed = True
        self._write_quietly()
        if self._handler_installed and threading.current_thread() is threading.main_thread():
            # Leave alone a handler that somebody installed after us.
            if signal.getsignal(self.checkpoint_signal) == self._on_signal:
                previous = self._previous_handler
                signal.signal(self.checkpoint_signal, signal.SIG_DFL if previous is None else previous)
            self._handler_installed = False

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Run(samples={self.samples!r}, checkpoint_samples={self.checkpoint_samples!r}, "
            f"stop_requested={self.stop_requested!r}, step_seconds={self.step_seconds!r})"
        )


def _check_count(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def _initialized_distributed() -> Any:
    """``torch.distributed`` if the script imported and initialised it with >1 process."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        if dist.get_world_size() <= 1:
            return None
    except Exception:
        return None
    return dist


def _all_ranks_any(dist: Any, flag: bool) -> bool:
    torch = sys.modules["torch"]
    backend = str(dist.get_backend()).lower()
    # NCCL only reduces CUDA tensors; gloo (and a mixed "cpu:gloo,cuda:nccl"
    # group) reduces CPU tensors.
    if "nccl" in backend and "gloo" not in backend:
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    tensor = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())
