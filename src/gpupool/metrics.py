"""Report a training job's metrics to gpupool: ``gpupool.metrics.log(step=3, loss=0.25)``.

Standard library only, so that any training script can import it without pulling in the
rest of gpupool. Each call appends one JSON line to the file named by
``$GPUPOOL_METRICS_FILE`` (the runner of every job sets it)::

    {"step": 3, "time": 1767225600.5, "values": {"loss": 0.25, "lr": 0.001}}

``step``: a non-negative integer or null; ``time``: when, in seconds since the epoch;
``values``: metric names (at most 100 characters of ``A-Za-z0-9_./-``, not starting with
``gpu.``, which is kept for the runner's GPU samples) and finite numbers. A program may write
such lines itself, in any language: one JSON object per line, each line in one write.
Outside gpupool (no ``$GPUPOOL_METRICS_FILE``) the first call says so on stderr once and
every call does nothing.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

ENV_VAR = "GPUPOOL_METRICS_FILE"

__all__ = ["ENV_VAR", "MetricsLog", "log"]


class MetricsLog:
    """Appends metric lines to one file, one ``write`` per line, from any thread."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._warned = False

    def log(self, step: int | None = None, **values: float) -> None:
        """Record ``values`` (name=number) at ``step`` (None: no step) and now."""
        line = _line(step, time.time(), values)
        with self._lock:
            fd = self._open()
            if fd is not None:
                os.write(fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int | None:
        if self._fd is None and self._path:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if self._fd is None and not self._warned:
            self._warned = True
            print(f"gpupool.metrics: ${ENV_VAR} is not set: metrics are not kept", file=sys.stderr)
        return self._fd


def _line(step: int | None, at: float, values: dict[str, float]) -> bytes:
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise TypeError(f"step must be an int or None, not {type(step).__name__}")
    record = {"step": step, "time": at, "values": values}
    return (json.dumps(record, separators=(",", ":"), allow_nan=True) + "\n").encode()


class _Default:
    """The process's log, made on first use from the environment as it is then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._log: MetricsLog | None = None

    def get(self) -> MetricsLog:
        with self._lock:
            if self._log is None:
                self._log = MetricsLog(os.environ.get(ENV_VAR))
            return self._log


_default = _Default()


def log(step: int | None = None, **values: float) -> None:
    """Report ``values`` (``loss=0.25``) at ``step`` to gpupool; see the module's doc."""
    _default.get().log(step, **values)
