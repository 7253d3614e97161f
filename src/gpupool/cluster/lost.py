"""What a node does once it has lost its head for ``node_lost_seconds``: it stops every
attempt it still runs, with the local executor's own stop (a stop request, then SIGTERM to
the runner, which kills the workload after the grace), since by then the server takes the
node's attempts for lost and may hand their GPUs to other work (``RayExecutor``).
"""

from __future__ import annotations

from pathlib import Path

import psutil

from gpupool.executors.base import Handle
from gpupool.executors.local import LocalExecutor
from gpupool.executors.remains import find_process
from gpupool.runner import layout


def stop_own_work(jobs_dir: Path, grace_seconds: float) -> list[Handle]:
    """Stop every attempt under ``jobs_dir`` that runs or may still start; the attempts that
    were running. Idempotent: an attempt that has ended (an exit record) is left alone."""
    executor = LocalExecutor(jobs_dir, fork_server=False)
    stopped = []
    for attempt_dir in sorted(jobs_dir.glob("*/attempts/*")):
        handle = running_attempt(executor, attempt_dir)
        if handle is not None:
            executor.stop(handle, grace_seconds)
            stopped.append(handle)
    return stopped


def running_attempt(executor: LocalExecutor, attempt_dir: Path) -> Handle | None:
    """The handle of the attempt in ``attempt_dir`` while its runner may run it, rebuilt from
    what the runner recorded; None when it ended or never started (an attempt not started yet
    is refused a start by ``recover``, which leaves it a stop request)."""
    job_id, attempt = _number(attempt_dir.parent.parent.name), _number(attempt_dir.name)
    if job_id is None or attempt is None:
        return None
    record = layout.read_json(attempt_dir / layout.STATE_FILE)
    if record is not None and "exit_code" in record:
        return None
    if record is not None and isinstance(record.get("runner_pid"), int):
        state = {k: record.get(k) for k in ("runner_pid", "runner_create_time")}
        return Handle(job_id, attempt, {"attempt_dir": str(attempt_dir), **state})
    if executor.recover(job_id, attempt) is None:
        return None
    return _starting(job_id, attempt, attempt_dir)


def _starting(job_id: int, attempt: int, attempt_dir: Path) -> Handle | None:
    """A runner that wrote ``started`` and no state yet: its pid, when that process is older
    than the ``started`` file (a pid reused since is someone else's, never signalled)."""
    started = attempt_dir / layout.STARTED_FILE
    try:
        pid, written = _number(started.read_text().strip()), started.stat().st_mtime
    except OSError:
        return None
    process = find_process(pid, None)
    try:
        created = process.create_time() if process is not None else None
    except psutil.Error:
        return None
    if created is None or created > written + 1.0:
        return None
    state = {"runner_pid": pid, "runner_create_time": created}
    return Handle(job_id, attempt, {"attempt_dir": str(attempt_dir), **state})


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() else None
