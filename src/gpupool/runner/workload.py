"""The launched workload as the runner sees it: its processes, how to stop them (stdlib only).

``Direct`` is a process group started as is (isolation off). ``Sandboxed`` is a bubblewrap
sandbox: bwrap's own process outside, its init (PID 1 inside) and the job's processes in a
PID namespace of their own. Stopping a sandboxed job signals every process of that
namespace but its init, so the job gets its SIGTERM and grace; killing it kills bwrap, whose
init dies with it, and the kernel then kills everything else in the namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

from gpupool.runner import sandbox
from gpupool.runner.cgroups import Cgroup
from gpupool.runner.layout import process_create_time


class Direct:
    """A workload process group (its leader's PID is the group's ID)."""

    def __init__(self, proc: subprocess.Popen[bytes], cgroup: Cgroup | None) -> None:
        self.proc = proc
        self.cgroup = cgroup

    def stop(self, sig: int) -> None:
        _signal_group(self.proc.pid, sig)
        if self.cgroup is not None:  # processes that left the group (setsid) are still here
            for pid in self.cgroup.processes():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def belongs(self, pid: int) -> bool:
        if self.cgroup is not None:
            return pid in self.cgroup.processes()
        try:
            return os.getpgid(pid) == self.proc.pid
        except OSError:
            return False

    def on_status(self, data: bytes) -> None:
        """Direct workloads report no status."""

    def record(self) -> dict[str, object]:
        return {}

    def has_exited(self) -> bool:
        """True once the leader ended (not reaped: its group id stays reserved)."""
        return _has_exited(self.proc.pid)

    def reap(self) -> int:
        """Kill what is left of the group, reap the leader, return its exit code."""
        _signal_group(self.proc.pid, signal.SIGKILL)
        return self.proc.wait()


class Sandboxed:
    """A bubblewrap sandbox; learns its init and PID namespace from bwrap's status fd."""

    def __init__(
        self, proc: subprocess.Popen[bytes], cgroup: Cgroup | None, block_w: int | None = None
    ) -> None:
        self.proc = proc
        self.cgroup = cgroup
        self.block_w = block_w  # bwrap starts the job once this is written to
        self.init_pid: int | None = None
        self.init_create_time: float | None = None
        self.namespace: int | None = None
        self._status = b""

    def release(self) -> None:
        """Let bwrap start the job (it waited while its sandbox was recorded)."""
        if self.block_w is None:
            return
        with contextlib.suppress(OSError):  # bwrap already gone: its exit tells
            os.write(self.block_w, b"go")
        os.close(self.block_w)
        self.block_w = None

    def on_status(self, data: bytes) -> None:
        """Parse bwrap's JSON status documents as they arrive (one per line)."""
        self._status += data
        while b"\n" in self._status:
            line, self._status = self._status.split(b"\n", 1)
            with contextlib.suppress(ValueError):
                self._learn(json.loads(line))

    def _learn(self, status: object) -> None:
        if not isinstance(status, dict):
            return
        if isinstance(status.get("child-pid"), int):
            self.init_pid = status["child-pid"]
            self.init_create_time = process_create_time(self.init_pid)
        if isinstance(status.get("pid-namespace"), int):
            self.namespace = status["pid-namespace"]
        elif self.init_pid is not None and self.namespace is None:
            self.namespace = sandbox.pid_namespace(self.init_pid)

    def stop(self, sig: int) -> None:
        """Send ``sig`` to every process of the job (SIGKILL: end the whole sandbox)."""
        if sig == signal.SIGKILL:
            self.kill()
            return
        for pid in self.processes():
            if pid != self.init_pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL bwrap, the runner's own child (its PID cannot be reused before the runner
        reaps it): its init dies with it, and the kernel ends the namespace with its init."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGKILL)

    def processes(self) -> list[int]:
        if self.namespace is None:
            return []
        return sandbox.members(self.namespace)

    def belongs(self, pid: int) -> bool:
        return self.namespace is not None and sandbox.pid_namespace(pid) == self.namespace

    def record(self) -> dict[str, object]:
        return {
            "sandbox": {
                "init_pid": self.init_pid,
                "init_create_time": self.init_create_time,
                "pid_namespace": self.namespace,
            }
        }

    def has_exited(self) -> bool:
        return _has_exited(self.proc.pid)

    def reap(self) -> int:
        return self.proc.wait()  # bwrap ended: so did its init, and the whole namespace


def _has_exited(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
