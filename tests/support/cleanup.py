"""Jobs outlive their server by design; tests must not leave theirs running."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import psutil


def kill_leftovers(jobs_dir: Path) -> None:
    """SIGKILL the runners and workload groups recorded under ``jobs_dir``."""
    for state_file in jobs_dir.glob("*/attempts/*/state.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            state = json.loads(state_file.read_text())
            for pid_key, pgid in (("runner_pid", state["runner_pid"]), ("pid", state["pgid"])):
                if state.get(pid_key) and _alive(state[pid_key]):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
