"""The dataset store on disk: each blob (a file's bytes, or a version's manifest) kept once,
at ``blobs/<first 2 hex>/<hex>`` below the store, named by its SHA-256.

A blob is received into a part file below ``incoming`` while its SHA-256 is computed,
checked against the name it was sent under, flushed to the disk (fsync), renamed into place
and its directory synced: only then is it recorded and acknowledged, so that an answered
upload survives kill -9 of the server or a crash of the machine. Kept blobs are read-only
(0444): nodes hard-link them into their caches, and the jobs' accounts read them there.
Part files left by a crash are removed when the server starts (``sweep_leftovers``).
Blobs no version references any more are removed by ``_gc`` (``remove_blob``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import tempfile
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from gpupool.domain.units import format_bytes
from gpupool.errors import BlobHashMismatch, DatasetTooLarge, InvalidRequest, StorageFull
from gpupool.settings import Settings

INCOMING = "incoming"  # blobs being received, below the dataset store
BLOBS = "blobs"
CHUNK = 1024 * 1024


def blob_path(store: Path, sha256: str) -> Path:
    """Where the blob ``sha256`` (hex) is kept below ``store``."""
    return store / BLOBS / sha256[:2] / sha256


def too_large(size: int, settings: Settings) -> DatasetTooLarge:
    return DatasetTooLarge(
        f"this is {format_bytes(size)}, more than the {format_bytes(settings.max_dataset_bytes)}"
        " this server keeps in one dataset version (GPUPOOL_MAX_DATASET_BYTES): split it into "
        "several datasets, or ask an admin to raise the limit",
        size_bytes=size,
        max_bytes=settings.max_dataset_bytes,
    )


class Incoming:
    """One blob (or a job's packed outputs) being received: a private part file below the
    store's ``incoming``, its SHA-256 and size so far; removed on exit unless published. (As
    ``services.jobs``'s receptions, kept apart so that jobs may use datasets.)"""

    def __init__(self, directory: Path, max_bytes: int, settings: Settings) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, name = tempfile.mkstemp(prefix="blob-", suffix=".part", dir=directory)
        except OSError as error:
            raise disk_error(error) from error
        self.path, self.size, self._max_bytes, self._settings = Path(name), 0, max_bytes, settings
        self._file = os.fdopen(fd, "wb")
        self._sha = hashlib.sha256()

    def __enter__(self) -> Incoming:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        self.path.unlink(missing_ok=True)

    def write(self, chunk: bytes) -> int:
        self.size += len(chunk)
        if self.size > self._max_bytes:
            raise too_large(self.size, self._settings)
        self._sha.update(chunk)
        try:
            return self._file.write(chunk)
        except OSError as error:
            raise disk_error(error) from error

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def finish(self) -> None:
        """Every byte on the disk (fsync), before it is read back or kept."""
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as error:
            raise disk_error(error) from error

    def publish(self, final: Path) -> None:
        """Rename into place, read-only, and sync the directory: once this returns, a crash
        keeps it."""
        try:
            final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.path, 0o444)
            os.replace(self.path, final)
            fd = os.open(final.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            raise disk_error(error) from error


def disk_error(error: OSError) -> Exception:
    """StorageFull for a full disk (507: the client may try again later); other errors as
    they are (an operator's problem: the server's log has them)."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull()
    return RuntimeError(f"dataset storage failed: {error}")


def incoming(settings: Settings, max_bytes: int | None = None) -> Incoming:
    """A new part file below the store's ``incoming``."""
    limit = settings.max_dataset_bytes if max_bytes is None else max_bytes
    return Incoming(settings.datasets_dir / INCOMING, limit, settings)


def _open(settings: Settings) -> Incoming:
    return incoming(settings)


async def receive(
    settings: Settings, chunks: AsyncIterator[bytes], expected: str, gzipped: bool = False
) -> int:
    """Receive the blob ``expected`` (hex) from ``chunks`` and keep it (once); its size.
    ``gzipped``: the body is gzip (Content-Encoding: gzip, as a client sends a manifest), and
    the blob is what it inflates to. BlobHashMismatch when the bytes have another SHA-256;
    DatasetTooLarge past the limit (inflated bytes count)."""
    with _open(settings) as incoming:
        async for chunk in _inflated(chunks) if gzipped else chunks:
            incoming.write(chunk)
        await asyncio.to_thread(_keep, settings, incoming, expected)
        return incoming.size


async def _inflated(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The gzip stream ``chunks`` inflated, CHUNK bytes at most at a time (what a small body
    inflates to is held to the store's limit by the part file, as it is written)."""
    inflate = zlib.decompressobj(wbits=31)
    try:
        async for chunk in chunks:
            while chunk:
                yield inflate.decompress(chunk, CHUNK)
                chunk = inflate.unconsumed_tail
        if not inflate.eof:
            raise zlib.error("the stream ends early")
    except zlib.error as error:
        raise InvalidRequest(
            f"the body is not gzip ({error}): send the bytes as they are, or gzip them whole "
            "with Content-Encoding: gzip"
        ) from None


def keep_stream(settings: Settings, source: BinaryIO) -> tuple[str, int]:
    """Keep the bytes read from ``source`` as a blob; its SHA-256 (hex) and size."""
    with _open(settings) as incoming:
        while chunk := source.read(CHUNK):
            incoming.write(chunk)
        sha = incoming.hexdigest()
        _keep(settings, incoming, sha)
        return sha, incoming.size


def keep_bytes(settings: Settings, data: bytes) -> str:
    """Keep ``data`` as a blob (a manifest made by the server); its SHA-256 (hex)."""
    with _open(settings) as incoming:
        incoming.write(data)
        sha = incoming.hexdigest()
        _keep(settings, incoming, sha)
        return sha


def read_blob(settings: Settings, sha256: str, max_bytes: int) -> bytes | None:
    """The blob's bytes (a manifest), None when the store lacks it; DatasetTooLarge over
    ``max_bytes``."""
    path = blob_path(settings.datasets_dir, sha256)
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size > max_bytes:
                raise too_large(size, settings)
            return file.read()
    except FileNotFoundError:
        return None


def present(settings: Settings, sha256: str) -> bool:
    return blob_path(settings.datasets_dir, sha256).is_file()


def _keep(settings: Settings, incoming: Incoming, expected: str) -> None:
    sha = incoming.hexdigest()
    if sha != expected:
        raise BlobHashMismatch(
            f"the bytes received have the SHA-256 {sha}, not {expected}: the file changed "
            "while it was sent, or was sent under another file's hash; upload it again",
            sha256=sha,
            expected=expected,
        )
    incoming.finish()
    final = blob_path(settings.datasets_dir, sha)
    try:
        # kept already: the same bytes (the part is discarded on exit), touched so that a
        # collection of unreferenced blobs leaves it to the upload that is recording it
        os.utime(final)
    except FileNotFoundError:  # not kept, or taken by a collection a moment ago
        incoming.publish(final)
    except OSError as error:
        raise disk_error(error) from error


def stored_blobs(settings: Settings) -> Iterator[tuple[str, os.stat_result]]:
    """Each blob of the store (hex, its stat), as the directory lists them."""
    root = settings.datasets_dir / BLOBS
    try:
        shards = [entry for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return
    for shard in shards:
        with contextlib.suppress(FileNotFoundError), os.scandir(shard.path) as entries:
            for entry in entries:
                if len(entry.name) == 64 and entry.name.startswith(shard.name):
                    with contextlib.suppress(FileNotFoundError):
                        yield entry.name, entry.stat(follow_symlinks=False)


def remove_blob(settings: Settings, sha256: str, changed_before: float) -> int:
    """Remove the blob unless it changed (was kept, or kept again: ``_keep`` touches it) at
    or after ``changed_before``; the bytes it took (0: it stays, or was gone). It is renamed
    below ``incoming`` first and looked at there: an upload that touched it just before the
    rename has it put back; one that touches it after finds it gone and keeps its own."""
    final = blob_path(settings.datasets_dir, sha256)
    taken = settings.datasets_dir / INCOMING / f"collected-{sha256}"
    try:
        taken.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.rename(final, taken)
    except FileNotFoundError:
        return 0
    stat = os.lstat(taken)
    if stat.st_mtime >= changed_before:
        os.replace(taken, final)  # kept again meanwhile: it stays
        return 0
    os.unlink(taken)
    return stat.st_blocks * 512
