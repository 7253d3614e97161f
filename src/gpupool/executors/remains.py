"""What is left of an attempt whose runner died, found from what the runner recorded.

A runner killed with SIGKILL takes its sandbox with it (bubblewrap dies with its parent, and
the kernel ends a PID namespace with its init), but a GPU is released only when that is
verified: the sandbox's init is gone (matched by PID and start time, since namespace inodes
and PIDs are reused), the attempt's cgroup is empty, and the workload's process group is
gone. Whatever remains is killed, and looked at again on the next poll.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from gpupool.runner import cgroups
from gpupool.runner.layout import STARTED_FILE, STATE_FILE, read_json
from gpupool.runner.wire import cgroup_name

# psutil and the runner compute create times the same way; allow for float noise and for a
# boot time that the kernel reports slightly differently over time.
CREATE_TIME_TOLERANCE_S = 1.0
# An empty attempt cgroup of another server (or node) this old is left over: a runner joins
# the one it makes within seconds (SANDBOX_REPORT_SECONDS at most) and removes it at its end.
LEFTOVER_AGE_S = 300.0


class Remains:
    """Finds, kills and cleans up what an attempt without its runner left running."""

    def find(self, record: dict[str, Any] | None) -> list[int]:
        """PIDs of the attempt's processes still alive (a process group counts by its id)."""
        if not record:
            return []
        found = set(self._sandbox_init(record))
        cgroup = cgroups.from_json(record.get("cgroup"))
        if cgroup is not None:
            found.update(cgroup.processes())
        if _group_alive(record.get("pgid"), record.get("workload_create_time")):
            found.add(record["pgid"])
        return sorted(found)

    def kill(self, record: dict[str, Any] | None) -> list[int]:
        """SIGKILL what remains; return what was found (it may take a moment to go)."""
        found = self.find(record)
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if record and _group_alive(record.get("pgid"), record.get("workload_create_time")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record["pgid"], signal.SIGKILL)
        return found

    def clean(self, record: dict[str, Any] | None) -> None:
        """Remove the attempt's empty cgroup, which its runner did not live to remove."""
        cgroup = cgroups.from_json((record or {}).get("cgroup"))
        if cgroup is not None:
            cgroup.remove()

    def sweep(self, jobs_dir: Path, now: float | None = None) -> list[str]:
        """Remove the node's empty attempt cgroups that nothing will use again (runners
        killed with their server leave theirs): this executor's own whose attempt no longer
        runs, and any other older than ``LEFTOVER_AGE_S`` (another server's runner joins its
        own within seconds of making it). A cgroup that still holds a process stays (the
        kernel refuses to remove it). Returns what was removed."""
        now = time.time() if now is None else now
        removed = []
        for directory in cgroups.leftovers():
            if self._spent(directory, jobs_dir, now):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
                    removed.append(directory)
        return removed

    def _spent(self, directory: str, jobs_dir: Path, now: float) -> bool:
        match = cgroups.JOB_NAME.match(os.path.basename(directory))
        if match is None:
            return False
        job_id, attempt = int(match.group(1)), int(match.group(2))
        outputs = jobs_dir / str(job_id) / "outputs"
        if os.path.basename(directory) == cgroup_name(job_id, attempt, str(outputs)):
            return not _attempt_runs(jobs_dir / str(job_id) / "attempts" / str(attempt))
        try:
            return now - os.stat(directory).st_mtime > LEFTOVER_AGE_S
        except OSError:
            return False

    def _sandbox_init(self, record: dict[str, Any]) -> list[int]:
        """The sandbox's init if it still runs: while it does, so may the job inside."""
        sandbox = record.get("sandbox")
        if not isinstance(sandbox, dict):
            return []
        proc = find_process(sandbox.get("init_pid"), sandbox.get("init_create_time"))
        try:
            return [] if proc is None or proc.status() == psutil.STATUS_ZOMBIE else [proc.pid]
        except psutil.Error:
            return []


def find_process(pid: Any, create_time: Any) -> psutil.Process | None:
    """The process ``pid`` if it is the one that was started at ``create_time`` (PIDs are
    reused); any process ``pid`` when the start time is not known."""
    if not isinstance(pid, int):
        return None
    try:
        proc = psutil.Process(pid)
        if isinstance(create_time, int | float) and abs(proc.create_time() - create_time) > (
            CREATE_TIME_TOLERANCE_S
        ):
            return None
    except psutil.Error:
        return None
    return proc


def _attempt_runs(attempt_dir: Path) -> bool:
    """Whether the attempt's runner (from its ``started`` file) still lives and has not
    recorded an exit."""
    record = read_json(str(attempt_dir / STATE_FILE)) or {}
    if "exit_code" in record:
        return False
    try:
        pid = int((attempt_dir / STARTED_FILE).read_text().strip())
    except (OSError, ValueError):
        return False
    proc = find_process(pid, record.get("runner_create_time"))
    try:
        return proc is not None and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group_alive(pgid: Any, leader_started: Any) -> bool:
    """Whether any process of the workload's group ``pgid`` lives. A group's id is not
    reused while the group has members; a live process with that PID but another start time
    means the group ended and the PID went to someone else."""
    if not isinstance(pgid, int) or pgid <= 1:
        return False
    if psutil.pid_exists(pgid) and find_process(pgid, leader_started) is None:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _any_member_not_zombie(pgid)


def _any_member_not_zombie(pgid: int) -> bool:
    for proc in psutil.process_iter(["pid"]):
        # a process listed a moment ago may be gone: os.getpgid then raises, psutil too
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
    return False
