"""CPU, host-memory and task limits of one attempt as a cgroup (stdlib only).

cgroup v2 where its memory and cpu controllers are on (``/sys/fs/cgroup/gpupool/<name>``),
else cgroup v1 (a child of the runner's own cgroup in the memory, cpu and pids hierarchies).
The workload joins it before it runs (between fork and exec, or while bubblewrap waits for
the runner), so every process it starts is counted. Where neither can be written (no root,
no delegation), ``create`` says why, and the job's events say its limits are not enforced.

Every attempt's cgroup is named ``job-N-attempt-M-<digest>``; ``leftovers`` finds those
the node still holds, for a sweep at start (runners killed with their server leave them).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import time

ROOT = "/sys/fs/cgroup"
CPU_PERIOD_US = 100_000
PARENT = "gpupool"
V1_CONTROLLERS = ("memory", "cpu", "pids")
JOB_NAME = re.compile(r"job-(\d+)-attempt-(\d+)-([0-9a-f]+)\Z")
REMOVE_WAIT_S = 2.0  # how long ``close`` waits for killed processes to leave the cgroup


class Cgroup:
    """One attempt's cgroup: a directory per hierarchy (one for v2; memory, cpu, pids for
    v1). ``memory_dir`` and ``pids_dir`` hold the files of those controllers (None: off)."""

    __slots__ = ("version", "dirs", "memory_dir", "pids_dir")

    def __init__(
        self, version: int, dirs: list[str], memory_dir: str | None, pids_dir: str | None = None
    ) -> None:
        self.version = version
        self.dirs = dirs
        self.memory_dir = memory_dir
        self.pids_dir = pids_dir

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the calling process) into every directory of the cgroup."""
        text = str(pid or os.getpid())
        for directory in self.dirs:
            _write(os.path.join(directory, "cgroup.procs"), text)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for going over the memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _field(self._file(self.memory_dir, name), "oom_kill")

    def pids_refused(self) -> int:
        """How many forks the kernel refused because the pids limit was reached."""
        return _field(self._file(self.pids_dir, "pids.events"), "max")

    def peak_memory(self) -> int | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            with open(self._file(self.memory_dir, name)) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def processes(self) -> list[int]:
        """PIDs still in the cgroup (any hierarchy)."""
        found: set[int] = set()
        for directory in self.dirs:
            path = os.path.join(directory, "cgroup.procs")
            with contextlib.suppress(OSError, ValueError), open(path) as f:
                found.update(int(line) for line in f if line.strip())
        return sorted(found)

    def remove(self) -> None:
        """Remove the directories once empty; a failure leaves them (the sweep at the next
        start takes them)."""
        for directory in self.dirs:
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    def close(self, wait_s: float = REMOVE_WAIT_S) -> None:
        """Kill whatever still runs in the cgroup (the attempt is over), then remove it;
        killed processes take a moment to leave, so this tries again for ``wait_s``."""
        deadline, pause = time.monotonic() + wait_s, 0.001
        while True:
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self.remove()
            if not any(os.path.isdir(d) for d in self.dirs) or time.monotonic() >= deadline:
                return
            time.sleep(pause)  # an exited workload leaves within a millisecond or two
            pause = min(pause * 2, 0.02)

    def views(self, root: str = ROOT) -> list[tuple[str, str]]:
        """``(directory, where a sandbox shows it)``: v2 as the whole ``/sys/fs/cgroup``, v1
        each hierarchy's as ``/sys/fs/cgroup/<controller>``, as a container sees its own."""
        if self.version == 2:
            return [(d, ROOT) for d in self.dirs]
        return [(d, os.path.join(ROOT, _hierarchy(root, d))) for d in self.dirs]

    def as_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "dirs": self.dirs,
            "memory_dir": self.memory_dir,
            "pids_dir": self.pids_dir,
        }

    def _file(self, directory: str | None, name: str) -> str:
        return os.path.join(directory or "/nonexistent", name)


def from_json(data: object) -> Cgroup | None:
    """A cgroup recorded by ``as_json`` (in state.json), or None."""
    if not isinstance(data, dict) or not isinstance(data.get("dirs"), list):
        return None
    version, dirs = int(data.get("version") or 0), list(data["dirs"])
    return Cgroup(version, dirs, data.get("memory_dir"), data.get("pids_dir"))


def create(
    name: str,
    cpus: float | None,
    memory_bytes: int | None,
    pids_max: int | None = None,
    root: str = ROOT,
) -> tuple[Cgroup | None, str]:
    """A new cgroup with these limits, or (None, why not). Nothing to limit: (None, "")."""
    if not cpus and not memory_bytes and not pids_max:
        return None, ""
    limits = (cpus, memory_bytes, pids_max)
    try:
        if _v2_controllers(root) >= {"memory", "cpu"}:
            return _create_v2(root, name, *limits), ""
        if os.path.isdir(os.path.join(root, "memory")):
            return _create_v1(root, name, *limits), ""
    except OSError as e:
        return None, f"cgroups cannot be written here ({e.strerror or e}); run the server as root"
    return None, "this host has neither cgroup v2 memory and cpu controllers nor cgroup v1"


def leftovers(root: str = ROOT) -> list[str]:
    """Every attempt cgroup (``job-N-attempt-M-*``) under gpupool's parents on this host: in
    v2 ``gpupool/``, in v1 the runner's own cgroup of each hierarchy (a runner's is the
    server's, whose start-up looks)."""
    found = []
    for parent in _parents(root):
        with contextlib.suppress(OSError):
            found += [os.path.join(parent, n) for n in os.listdir(parent) if JOB_NAME.match(n)]
    return sorted(found)


def _parents(root: str) -> list[str]:
    parents = [os.path.join(root, PARENT)]
    for controller in V1_CONTROLLERS:
        parents.append(os.path.join(root, controller, _own_v1_path(controller).lstrip("/")))
    return [p for p in dict.fromkeys(os.path.normpath(p) for p in parents) if os.path.isdir(p)]


def _create_v2(
    root: str, name: str, cpus: float | None, memory_bytes: int | None, pids_max: int | None
) -> Cgroup:
    parent = os.path.join(root, PARENT)
    os.makedirs(parent, exist_ok=True)
    wanted = " ".join(f"+{c}" for c in ("memory", "cpu", "pids") if c in _v2_controllers(root))
    for directory in (root, parent):
        with contextlib.suppress(OSError):  # often on already
            _write(os.path.join(directory, "cgroup.subtree_control"), wanted)
    directory = os.path.join(parent, name)
    os.makedirs(directory, exist_ok=True)
    if memory_bytes:
        _write(os.path.join(directory, "memory.max"), str(memory_bytes))
        _try_write(os.path.join(directory, "memory.swap.max"), "0")
        _try_write(os.path.join(directory, "memory.oom.group"), "1")
    if cpus:
        _write(os.path.join(directory, "cpu.max"), f"{_quota(cpus)} {CPU_PERIOD_US}")
    pids_dir = None
    if pids_max and os.path.exists(os.path.join(directory, "pids.max")):
        _write(os.path.join(directory, "pids.max"), str(pids_max))
        pids_dir = directory
    return Cgroup(2, [directory], directory, pids_dir)


def _create_v1(
    root: str, name: str, cpus: float | None, memory_bytes: int | None, pids_max: int | None
) -> Cgroup:
    dirs, memory_dir, pids_dir = [], None, None
    if memory_bytes:
        memory_dir = _v1_child(root, "memory", name)
        _write(os.path.join(memory_dir, "memory.limit_in_bytes"), str(memory_bytes))
        _try_write(os.path.join(memory_dir, "memory.memsw.limit_in_bytes"), str(memory_bytes))
        dirs.append(memory_dir)
    if cpus and os.path.isdir(os.path.join(root, "cpu")):
        cpu_dir = _v1_child(root, "cpu", name)
        _write(os.path.join(cpu_dir, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
        _write(os.path.join(cpu_dir, "cpu.cfs_quota_us"), str(_quota(cpus)))
        dirs.append(cpu_dir)
    if pids_max and os.path.isdir(os.path.join(root, "pids")):
        pids_dir = _v1_child(root, "pids", name)
        _write(os.path.join(pids_dir, "pids.max"), str(pids_max))
        dirs.append(pids_dir)
    return Cgroup(1, dirs, memory_dir, pids_dir)


def _hierarchy(root: str, directory: str) -> str:
    """The v1 hierarchy (``memory``) a cgroup directory below ``root`` belongs to."""
    return os.path.relpath(directory, root).split(os.sep)[0]


def _v1_child(root: str, controller: str, name: str) -> str:
    """A child of the runner's own cgroup in one v1 hierarchy, so outer limits still hold."""
    directory = os.path.join(root, controller, _own_v1_path(controller).lstrip("/"), name)
    os.makedirs(directory, exist_ok=True)
    return directory


def _own_v1_path(controller: str) -> str:
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return path
    return "/"


def _v2_controllers(root: str) -> set[str]:
    try:
        with open(os.path.join(root, "cgroup.controllers")) as f:
            return set(f.read().split())
    except OSError:
        return set()


def _quota(cpus: float) -> int:
    return max(1000, math.ceil(cpus * CPU_PERIOD_US))


def _field(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
    except (OSError, ValueError):
        pass
    return 0


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _try_write(path: str, text: str) -> None:
    with contextlib.suppress(OSError):
        _write(path, text)
