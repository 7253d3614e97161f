"""Host facts: logical CPUs, memory, host name and NUMA nodes (psutil and sysfs)."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import psutil

_NODE = re.compile(r"^node\d+$")


def cpu_count() -> int:
    """Return the number of logical CPUs (at least 1)."""
    return psutil.cpu_count(logical=True) or os.cpu_count() or 1


def memory_bytes() -> int:
    """Return the total physical memory in bytes (0 when the system will not say)."""
    try:
        return int(psutil.virtual_memory().total)
    except (OSError, RuntimeError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return 0


def hostname() -> str | None:
    """Return this machine's host name, or None when the system gives none."""
    try:
        return socket.gethostname() or None
    except OSError:
        return None


def numa_node_count(sysfs_root: Path) -> int | None:
    """Count ``devices/system/node/node<N>``; None when the directory is absent or unreadable."""
    try:
        names = [path.name for path in (sysfs_root / "devices" / "system" / "node").iterdir()]
    except OSError:
        return None
    count = sum(1 for name in names if _NODE.match(name))
    return count or None
