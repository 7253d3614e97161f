"""Files of an attempt directory, shared by the runner and the executors (stdlib only).

ATTEMPT_DIR/
    spec.json    what to run, written by the executor before it launches the runner
    started      created with O_EXCL by the runner: the attempt runs at most once
    state.json   written atomically by the runner: pids when the workload starts, plus the
                 exit record when it ends
    stop.json    written by the executor to ask for a stop: {"grace_seconds": x}
    output.log   the workload's stdout and stderr, capped
    runner.log   the runner's own stderr (tracebacks only; normally empty)
    metrics.jsonl  the job's metric points the runner kept, and its GPU samples, one JSON
                 array [name, step, time, value] per line (see gpupool.runner.metricsink)

The job itself writes its metrics to OUTPUT_DIR/.gpupool/metrics-<attempt>.jsonl
($GPUPOOL_METRICS_FILE), which the runner follows.
"""

from __future__ import annotations

import json
import os

# No pathlib or typing here: they would add milliseconds to every runner start.

SPEC_FILE = "spec.json"
STARTED_FILE = "started"
STATE_FILE = "state.json"
STOP_FILE = "stop.json"
PROGRESS_FILE = "progress"  # what the runner does before the workload starts (its env build)
LOG_FILE = "output.log"
RUNNER_LOG_FILE = "runner.log"
METRICS_FILE = "metrics.jsonl"
JOB_METRICS_DIR = ".gpupool"  # in the job's outputs

EXIT_REFUSED = 3  # the runner's own exit code when the attempt was already started
EXIT_USAGE = 2
CODE_RUNNER_ERROR = 125  # recorded exit code: the runner could not set the workload up
CODE_NOT_EXECUTABLE = 126
CODE_NOT_FOUND = 127


def job_metrics_file(output_dir: str, attempt: int) -> str:
    """Where an attempt's job writes its metrics (``$GPUPOOL_METRICS_FILE``)."""
    return os.path.join(output_dir, JOB_METRICS_DIR, f"metrics-{attempt}.jsonl")


def atomic_write_json(
    path: str | os.PathLike[str], data: dict[str, object], durable: bool = True
) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old or the new file, never half.
    ``durable``: synced to disk before this returns, so that it survives a crash of the
    machine too (two syncs, milliseconds each); a record that means nothing after such a
    crash (what a running process is doing) is not."""
    directory, name = os.path.split(os.fspath(path))
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    payload = json.dumps(data, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        _fsync_dir(directory)


def sync(path: str | os.PathLike[str]) -> None:
    """Sync a file written with ``durable=False``, and its directory, to disk now (best
    effort: a file that cannot be opened again is left as it is)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    _fsync_dir(os.path.dirname(os.fspath(path)))


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_json(path: str | os.PathLike[str]) -> dict[str, object] | None:
    """The JSON object in ``path``, or None when it is missing or not a JSON object."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def process_create_time(pid: int | str = "self") -> float | None:
    """Start time of a process in seconds since the epoch, as psutil's ``create_time()``.

    Computed the same way psutil does on Linux (boot time from /proc/stat plus the start
    time in clock ticks from /proc/PID/stat), so the two compare equal up to rounding.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            boot = next(line for line in f if line.startswith(b"btime"))
    except (OSError, StopIteration):
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return float(fields[19]) / os.sysconf("SC_CLK_TCK") + float(boot.split()[1])


def notify(fifo: str | None) -> None:
    """Tell a listening executor that a state file changed: one byte into its FIFO.

    Never blocks and never fails: with no reader (no server) or a full FIFO there is nothing
    to do, since the executor also polls.
    """
    if not fifo:
        return
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b"!")
    except OSError:
        pass
    finally:
        os.close(fd)
