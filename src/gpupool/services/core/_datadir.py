"""One server per data directory: the lock a server holds on it for its whole life, and the
space it keeps free there for its database (``Reserve``).

The lock is an ``flock`` on ``server.lock`` in the data directory. The kernel drops it when
the process ends, however it ends (``kill -9`` included), so a stale file never keeps a new
server out; the file's content (the holder's pid and URL) is read only while the lock is
held by someone, so it is never stale when it is shown. Only ``gpupool server`` takes it:
in-process platforms (tests, tools) open a data directory without it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gpupool.errors import DataDirInUse

LOCK_FILE = "server.lock"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holder:
    """The server holding a data directory, as it wrote itself into the lock file."""

    pid: int | None
    url: str | None


class DataDirLock:
    """The server's hold on its data directory; ``acquire`` once, ``release`` at exit."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, url: str) -> None:
        """Take the lock and write this server's pid and URL into it; DataDirInUse when
        another process holds it. The data directory is created (0700) if missing."""
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Python's descriptors are not inherited by the runners the server starts (PEP 446):
        # runners outlive the server by design and must not keep its lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise DataDirInUse(_in_use_message(holder, self.data_dir)) from None
        _write(fd, Holder(os.getpid(), url))
        self._fd = fd

    def release(self) -> None:
        """Let the next server in (closing the file drops the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def current_holder(data_dir: Path) -> Holder | None:
    """The server that holds ``data_dir`` now, or None when none does."""
    path = data_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read(fd)
    finally:
        os.close(fd)
    return None


def _in_use_message(holder: Holder, data_dir: Path) -> str:
    who = f"another gpupool server (pid {holder.pid})" if holder.pid else "another gpupool server"
    where = f" at {holder.url}" if holder.url else ""
    return (
        f"{who}{where} uses {data_dir}: stop it first, or give this server a data directory "
        "of its own (--data-dir or GPUPOOL_DATA_DIR)"
    )


def _write(fd: int, holder: Holder) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": holder.pid, "url": holder.url}).encode() + b"\n", 0)


def _read(fd: int) -> Holder:
    """What the holder wrote; empty while it is between taking the lock and writing."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        pid, url = data.get("pid"), data.get("url")
        return Holder(pid if isinstance(pid, int) else None, url if isinstance(url, str) else None)
    return Holder(None, None)


RESERVE_FILE = "disk-reserve"
RESERVE_SHARE = 20  # the reserve is at most this part of the disk, the low mark half of that


class Reserve:
    """Space kept for the server's own database on the data directory's disk.

    A file of ``size`` bytes (at most a twentieth of the disk), made where there is room.
    When the disk's free space falls under ``low`` bytes (at most a fortieth of the disk),
    ``release`` deletes it, so that the database can still write (every request may write:
    a token's last use, a session) while the watch stops what fills the disk; ``keep``
    makes it again once there is room for it and the low mark.
    """

    def __init__(self, data_dir: Path, size: int, low: int) -> None:
        self.path = data_dir / RESERVE_FILE
        self.data_dir, self.size, self.low_mark = data_dir, size, low

    def keep(self) -> bool:
        """Make the reserve if it is missing and there is room; True when it is there."""
        if self.path.exists():
            return True
        size, low = self.limits()
        if size == 0 or self.free() < size + 2 * low:
            return False
        try:
            _allocate(self.path, size)
        except OSError:
            self.path.unlink(missing_ok=True)
            return False
        return True

    def low(self) -> bool:
        """The disk's free space is under the low mark."""
        return self.free() < self.limits()[1]

    def release(self) -> bool:
        """Give the reserve back to the disk; True when there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        log.warning(
            "the disk of %s is nearly full (%d bytes free): gave back the %s kept for the database",
            self.data_dir,
            self.free(),
            RESERVE_FILE,
        )
        return True

    def free(self) -> int:
        """Bytes free on the disk for the server (0 when it cannot be read)."""
        try:
            return shutil.disk_usage(self.data_dir).free
        except OSError:
            return 0

    def limits(self) -> tuple[int, int]:
        """The reserve's size and the low mark, for this disk."""
        try:
            total = shutil.disk_usage(self.data_dir).total
        except OSError:
            return 0, 0
        return min(self.size, total // RESERVE_SHARE), min(self.low_mark, total // 40)


def _allocate(path: Path, size: int) -> None:
    """Write the file for real (blocks allocated, not a sparse file), private to the server."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise
            _write_zeros(fd, size)  # a file system without fallocate (tmpfs has it)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_zeros(fd: int, size: int) -> None:
    chunk = b"\0" * (1 << 20)
    written = 0
    while written < size:
        written += os.write(fd, chunk[: min(len(chunk), size - written)])
