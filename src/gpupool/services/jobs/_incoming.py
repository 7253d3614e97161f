"""An archive being received into a store: a private temporary file, its SHA-256 and size so
far, flushed to disk and renamed into place under its own name only once it is whole.

Code uploads (``_code``) and model versions (``services.models``) are both received
this way; each passes its own limit, its own "too large" error and the words its storage
errors use. A part file left behind by a crash is removed by a later ``open`` once a day old,
and every one by ``sweep_leftovers`` when the server starts (it holds the data directory's
lock then, so no reception of its own or of another server is under way).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

from gpupool.errors import StorageFull

STALE_PART_SECONDS = 86400.0  # a part file this old was left by a crash: removed


class Incoming:
    """One archive being received; ``too_large(size)`` is raised once it grows past
    ``max_bytes``. Used as a context manager, the part file is removed on exit unless it was
    published."""

    def __init__(
        self, path: Path, fd: int, max_bytes: int, too_large: Callable[[int], Exception], what: str
    ) -> None:
        self.path, self.size = path, 0
        self._max_bytes, self._too_large, self._what = max_bytes, too_large, what
        self._file = os.fdopen(fd, "wb")
        self._sha = hashlib.sha256()

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        prefix: str,
        max_bytes: int,
        too_large: Callable[[int], Exception],
        what: str,
    ) -> Incoming:
        """A new part file ``<prefix>-*.part`` in ``directory``; ``what`` names the storage in
        the errors the disk gives ("code snapshot storage failed: ...")."""
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            _sweep(directory, prefix)
            fd, name = tempfile.mkstemp(prefix=f"{prefix}-", suffix=".part", dir=directory)
        except OSError as error:
            raise disk_error(error, what) from error
        return cls(Path(name), fd, max_bytes, too_large, what)

    def __enter__(self) -> Incoming:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.discard()

    def write(self, chunk: bytes) -> int:
        self.size += len(chunk)
        if self.size > self._max_bytes:
            raise self._too_large(self.size)
        self._sha.update(chunk)
        try:
            return self._file.write(chunk)
        except OSError as error:
            raise disk_error(error, self._what) from error

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def finish(self) -> None:
        """Every byte on the disk (fsync), before it is read back or kept."""
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as error:
            raise disk_error(error, self._what) from error

    def publish(self, final: Path) -> None:
        """Rename into place and sync the directory: once this returns, a crash keeps it."""
        try:
            final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.path, 0o400)
            os.replace(self.path, final)
            _sync_directory(final.parent)
        except OSError as error:
            raise disk_error(error, self._what) from error

    def discard(self) -> None:
        """Close and remove the part file (nothing once it was published)."""
        with contextlib.suppress(OSError):
            self._file.close()
        self.path.unlink(missing_ok=True)


def sweep_leftovers(directories: Iterable[Path]) -> list[Path]:
    """Remove every part file in ``directories``: receptions cut short when the last server
    ended (kill -9, a crash). Only for the server that holds the data directory's lock, at
    start: a part file then belongs to no reception under way. The paths removed."""
    removed = []
    for directory in directories:
        for part in directory.glob("*.part"):
            with contextlib.suppress(OSError):
                part.unlink()
                removed.append(part)
    return removed


def disk_error(error: OSError, what: str) -> Exception:
    """StorageFull for a full disk (507: the client may try again later); other errors as
    they are (an operator's problem: the server's log has them)."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull()
    return RuntimeError(f"{what} failed: {error}")


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sweep(directory: Path, prefix: str) -> None:
    """Remove what receptions cut short by a crash left behind (a day old, so never a live
    one)."""
    cutoff = time.time() - STALE_PART_SECONDS
    for part in directory.glob(f"{prefix}-*.part"):
        with contextlib.suppress(OSError):
            if part.stat().st_mtime < cutoff:
                part.unlink()
