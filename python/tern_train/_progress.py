"""Atomic writing of the progress file that ``tern agent`` reads."""

import json
import math
import os
import tempfile
from typing import Any, Mapping, Union

__all__ = ["write_progress"]

PathLike = Union[str, "os.PathLike[str]"]


def write_progress(path: PathLike, data: Mapping[str, Any]) -> None:
    """Replace the JSON file at ``path`` with ``data``, atomically.

    The object is written to a temporary file in the same directory, flushed
    and fsynced, then moved over ``path`` with ``os.replace``: a reader sees
    either the old file or the new one, never a partial write.  The directory
    is created if missing.  NaN and infinities are refused (they are not
    JSON), as is anything ``json`` cannot encode.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"progress data must be a mapping, not {type(data).__name__}")
    for key, value in data.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"progress field {key!r} is {value!r}, which JSON cannot represent")
    # Encode before touching the filesystem so a bad value leaves no temp file.
    payload = json.dumps(dict(data), allow_nan=False, sort_keys=True).encode("utf-8") + b"\n"

    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    # Makes the rename itself durable on POSIX filesystems; best effort only.
    flags = getattr(os, "O_DIRECTORY", None)
    if flags is None:
        return
    try:
        fd = os.open(directory, os.O_RDONLY | flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
