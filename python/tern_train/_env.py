"""Parsing of the environment that ``tern agent`` sets for training processes.

Only the standard library is used here.  Every variable is optional: a script
started by hand, without the agent, gets the defaults documented on :class:`Env`.
Empty strings count as unset.  A value that is present but malformed raises
``ValueError`` with the variable's name in the message, so a misconfigured
agent or launcher is caught at start-up instead of half-way through a run.
"""

import math
import os
import signal
from dataclasses import dataclass
from typing import Mapping, Optional

__all__ = ["Env", "env", "parse_signal"]

_DEFAULT_SIGNAL = signal.SIGTERM
# A handler cannot be installed for these, so they can never be the checkpoint signal.
_UNCATCHABLE = {"SIGKILL", "SIGSTOP"}


@dataclass(frozen=True)
class Env:
    """The TERN_* settings and torchrun's rank variables, parsed and typed.

    Defaults (variable unset or empty): ``checkpoint_signal`` SIGTERM; ``rank``
    and ``local_rank`` 0; ``world_size`` 1; ``local_world_size`` equal to
    ``world_size`` (one node); everything else ``None``.
    """

    job: Optional[str] = None  # TERN_JOB
    progress_file: Optional[str] = None  # TERN_PROGRESS_FILE
    incarnation: Optional[int] = None  # TERN_INCARNATION
    instance: Optional[str] = None  # TERN_INSTANCE
    checkpoint_signal: signal.Signals = _DEFAULT_SIGNAL  # TERN_CHECKPOINT_SIGNAL
    stop_grace_seconds: Optional[float] = None  # TERN_STOP_GRACE_SECONDS
    stop_file: Optional[str] = None  # TERN_STOP_FILE
    accelerator: Optional[str] = None  # TERN_ACCELERATOR
    gpus_per_node: Optional[int] = None  # TERN_GPUS_PER_NODE
    rank: int = 0  # RANK
    local_rank: int = 0  # LOCAL_RANK
    world_size: int = 1  # WORLD_SIZE
    local_world_size: int = 1  # LOCAL_WORLD_SIZE

    @property
    def nodes(self) -> int:
        """Number of nodes: WORLD_SIZE // LOCAL_WORLD_SIZE, at least 1."""
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_local_zero(self) -> bool:
        """True for the process that writes this node's progress file."""
        return self.local_rank == 0

    @classmethod
    def from_environ(cls, environ: Optional[Mapping[str, str]] = None) -> "Env":
        """Parse ``environ`` (default: ``os.environ``)."""
        e = os.environ if environ is None else environ

        def text(name: str) -> Optional[str]:
            value = e.get(name)
            if value is None:
                return None
            value = value.strip()
            return value or None

        world_size = _int(text("WORLD_SIZE"), "WORLD_SIZE", minimum=1, default=1)
        rank = _int(text("RANK"), "RANK", minimum=0, default=0)
        if rank >= world_size:
            raise ValueError(f"RANK={rank} must be smaller than WORLD_SIZE={world_size}")
        local_world_size = _int(
            text("LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE", minimum=1, default=world_size
        )
        local_rank = _int(text("LOCAL_RANK"), "LOCAL_RANK", minimum=0, default=0)

        sig_text = text("TERN_CHECKPOINT_SIGNAL")
        if sig_text is None:
            checkpoint_signal = _DEFAULT_SIGNAL
        else:
            try:
                checkpoint_signal = parse_signal(sig_text)
            except ValueError as err:
                raise ValueError(f"TERN_CHECKPOINT_SIGNAL: {err}") from None

        return cls(
            job=text("TERN_JOB"),
            progress_file=text("TERN_PROGRESS_FILE"),
            incarnation=_int(text("TERN_INCARNATION"), "TERN_INCARNATION", minimum=0),
            instance=text("TERN_INSTANCE"),
            checkpoint_signal=checkpoint_signal,
            stop_grace_seconds=_float(text("TERN_STOP_GRACE_SECONDS"), "TERN_STOP_GRACE_SECONDS"),
            stop_file=text("TERN_STOP_FILE"),
            accelerator=text("TERN_ACCELERATOR"),
            gpus_per_node=_int(text("TERN_GPUS_PER_NODE"), "TERN_GPUS_PER_NODE", minimum=1),
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            local_world_size=local_world_size,
        )


def env(environ: Optional[Mapping[str, str]] = None) -> Env:
    """Parse the agent's environment (default: ``os.environ``) into an :class:`Env`."""
    return Env.from_environ(environ)


def parse_signal(value: str) -> signal.Signals:
    """Turn ``"SIGUSR1"``, ``"usr1"`` or ``"10"`` into a :class:`signal.Signals`.

    SIGKILL and SIGSTOP are refused because no handler can catch them.
    """
    raw = value.strip()
    if not raw:
        raise ValueError("empty signal name")
    if raw.isdigit():
        try:
            sig = signal.Signals(int(raw))
        except ValueError:
            raise ValueError(f"unknown signal number {raw!r}") from None
    else:
        name = raw.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        sig = getattr(signal.Signals, name, None)
        if not isinstance(sig, signal.Signals) or name.startswith("SIG_"):
            raise ValueError(f"unknown signal {raw!r}")
    if sig.name in _UNCATCHABLE:
        raise ValueError(f"{sig.name} cannot be caught, so it cannot be the checkpoint signal")
    return sig


def _int(value: Optional[str], name: str, minimum: int, default: Optional[int] = None) -> Optional[int]:
    if value is None:
        return default
    try:
        number = int(value, 10)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None
    if number < minimum:
        raise ValueError(f"{name}={value!r} must be >= {minimum}")
    return number


def _float(value: Optional[str], name: str) -> Optional[float]:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name}={value!r} must be a finite number >= 0")
    return number
