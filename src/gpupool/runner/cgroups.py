"""CPU and host-memory limits of one attempt as a cgroup (stdlib only).

cgroup v2 where its memory and cpu controllers are on (``/sys/fs/cgroup/gpupool/<name>``),
else cgroup v1 (a child of the runner's own cgroup in the memory and cpu hierarchies). The
workload joins it between fork and exec, so every process it starts is counted. Where
neither can be written (no root, no delegation), ``create`` says why, and the job's events
say its limits are not enforced.
"""

from __future__ import annotations

import contextlib
import math
import os

V2_ROOT = "/sys/fs/cgroup"
V1_ROOT = "/sys/fs/cgroup"
CPU_PERIOD_US = 100_000
PARENT = "gpupool"


class Cgroup:
    """One attempt's cgroup: a directory per hierarchy (one for v2, memory and cpu for v1)."""

    __slots__ = ("version", "dirs", "memory_dir")

    def __init__(self, version: int, dirs: list[str], memory_dir: str | None) -> None:
        self.version = version
        self.dirs = dirs
        self.memory_dir = memory_dir

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the calling process) into every directory of the cgroup."""
        text = str(pid or os.getpid())
        for directory in self.dirs:
            _write(os.path.join(directory, "cgroup.procs"), text)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for going over the memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _field(self._memory_file(name), "oom_kill")

    def peak_memory(self) -> int | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            with open(self._memory_file(name)) as f:
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
        """Remove the directories once empty; a failure leaves them (harmless, and small)."""
        for directory in self.dirs:
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    def as_json(self) -> dict[str, object]:
        return {"version": self.version, "dirs": self.dirs, "memory_dir": self.memory_dir}

    def _memory_file(self, name: str) -> str:
        return os.path.join(self.memory_dir or "/nonexistent", name)


def from_json(data: object) -> Cgroup | None:
    """A cgroup recorded by ``as_json`` (in state.json), or None."""
    if not isinstance(data, dict) or not isinstance(data.get("dirs"), list):
        return None
    return Cgroup(int(data.get("version") or 0), list(data["dirs"]), data.get("memory_dir"))


def create(name: str, cpus: float | None, memory_bytes: int | None) -> tuple[Cgroup | None, str]:
    """A new cgroup with these limits, or (None, why not). Nothing to limit: (None, "")."""
    if not cpus and not memory_bytes:
        return None, ""
    try:
        if _v2_controllers() >= {"memory", "cpu"}:
            return _create_v2(name, cpus, memory_bytes), ""
        if os.path.isdir(os.path.join(V1_ROOT, "memory")):
            return _create_v1(name, cpus, memory_bytes), ""
    except OSError as e:
        return None, f"cgroups cannot be written here ({e.strerror or e}); run the server as root"
    return None, "this host has neither cgroup v2 memory and cpu controllers nor cgroup v1"


def _create_v2(name: str, cpus: float | None, memory_bytes: int | None) -> Cgroup:
    parent = os.path.join(V2_ROOT, PARENT)
    os.makedirs(parent, exist_ok=True)
    for directory in (V2_ROOT, parent):
        with contextlib.suppress(OSError):  # often on already
            _write(os.path.join(directory, "cgroup.subtree_control"), "+memory +cpu")
    directory = os.path.join(parent, name)
    os.makedirs(directory, exist_ok=True)
    if memory_bytes:
        _write(os.path.join(directory, "memory.max"), str(memory_bytes))
        _try_write(os.path.join(directory, "memory.swap.max"), "0")
        _try_write(os.path.join(directory, "memory.oom.group"), "1")
    if cpus:
        _write(os.path.join(directory, "cpu.max"), f"{_quota(cpus)} {CPU_PERIOD_US}")
    return Cgroup(2, [directory], directory)


def _create_v1(name: str, cpus: float | None, memory_bytes: int | None) -> Cgroup:
    dirs, memory_dir = [], None
    if memory_bytes:
        memory_dir = _v1_child("memory", name)
        _write(os.path.join(memory_dir, "memory.limit_in_bytes"), str(memory_bytes))
        _try_write(os.path.join(memory_dir, "memory.memsw.limit_in_bytes"), str(memory_bytes))
        dirs.append(memory_dir)
    if cpus and os.path.isdir(os.path.join(V1_ROOT, "cpu")):
        cpu_dir = _v1_child("cpu", name)
        _write(os.path.join(cpu_dir, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
        _write(os.path.join(cpu_dir, "cpu.cfs_quota_us"), str(_quota(cpus)))
        dirs.append(cpu_dir)
    return Cgroup(1, dirs, memory_dir)


def _v1_child(controller: str, name: str) -> str:
    """A child of the runner's own cgroup in one v1 hierarchy, so outer limits still hold."""
    directory = os.path.join(V1_ROOT, controller, _own_v1_path(controller).lstrip("/"), name)
    os.makedirs(directory, exist_ok=True)
    return directory


def _own_v1_path(controller: str) -> str:
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return path
    return "/"


def _v2_controllers() -> set[str]:
    try:
        with open(os.path.join(V2_ROOT, "cgroup.controllers")) as f:
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
