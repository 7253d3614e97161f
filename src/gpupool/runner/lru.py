"""Least-recently-used collection of what a node keeps for its jobs (stdlib only): its Python
environments (``runner.envbuild``) and its materialised dataset versions
(``runner.datasets``) both use it.

Each kept thing is a directory below one root with a lock file of its own. A job that uses
it holds the lock shared while it runs and touches the lock file when it starts (its mtime
is the thing's last use); a collection takes the lock exclusive, without waiting, before it
removes one, so it never removes what a job holds, and it leaves alone what was used in the
last ``recent`` seconds (a job between finding it and holding it: flock's change from
exclusive to shared, after a build, is not atomic).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterable


def usage(root: str) -> int:
    """The bytes below ``root`` on disk, as ``du`` counts them: each file once, however many
    links it has there."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                stat = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total


def used_at(lock: str) -> float:
    """When the thing whose lock file is ``lock`` was last used (0: never, or no lock)."""
    try:
        return os.stat(lock).st_mtime
    except OSError:
        return 0.0


def try_lock(fd: int, how: int) -> bool:
    """``flock(fd, how)`` without waiting; False when another holds it."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def wait_lock(fd: int, how: int, stopped: Callable[[], bool], poll: float, stop: type) -> None:
    """``flock(fd, how)``, polling every ``poll`` seconds; raises ``stop`` once ``stopped()``."""
    while not try_lock(fd, how):
        if stopped():
            raise stop
        time.sleep(poll)


def collect(
    root: str,
    max_bytes: int,
    kept: Iterable[tuple[float, str]],
    open_lock: Callable[[str], int],
    remove: Callable[[str], None],
    *,
    recent: float,
    now: float | None = None,
    measure: Callable[[], int] | None = None,
) -> tuple[list[str], int]:
    """Remove the least recently used of ``kept`` ((last use, name) pairs) until what
    ``root`` takes (``measure()``, by default ``usage(root)``) is at most ``max_bytes``,
    skipping those used in the last ``recent`` seconds and those whose lock
    (``open_lock(name)``, a descriptor this closes) another holds; ``remove(name)`` removes
    one. The names removed, oldest first, and what ``root`` takes after."""
    measure = measure or (lambda: usage(root))
    total = measure()
    now = time.time() if now is None else now
    removed: list[str] = []
    for last_use, name in sorted(kept):
        if total <= max_bytes:
            break
        if now - last_use < recent:
            continue
        lock = open_lock(name)
        try:
            if not try_lock(lock, fcntl.LOCK_EX):
                continue  # in use, or being made
            remove(name)
            removed.append(name)
        finally:
            os.close(lock)
        total = measure()
    return removed, total


def size(count: int) -> str:
    """``count`` bytes for a message: MiB, or GiB from one."""
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"
