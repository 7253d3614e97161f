"""Receiving blobs into the dataset store: each blob (a file's bytes, or a version's
manifest) kept once, named by its SHA-256, in the store the settings name (``_stores``: a
POSIX directory, ``blobs/<first 2 hex>/<hex>``, or an S3-compatible object store).

A blob is received into a part file below the POSIX store's ``incoming`` (on the server's
disk, whichever store keeps it) while its SHA-256 is computed, checked against the name it
was sent under, flushed to the disk (fsync) and put into the store (``BlobStore.put``: a
rename and a synced directory, or an upload to S3): only then is it recorded and
acknowledged, so that an answered upload survives kill -9 of the server or a crash of the
machine. Kept blobs are read-only (0444): nodes hard-link them into their caches, and the
jobs' accounts read them there. Part files left by a crash are removed when the server
starts (``sweep_leftovers``). Blobs no version references any more are removed by ``_gc``
(``remove_blob``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from gpupool.domain.units import format_bytes
from gpupool.errors import BlobHashMismatch, DatasetTooLarge, InvalidRequest
from gpupool.services.datasets._stores import INCOMING, blob_key, blob_store, disk_error
from gpupool.settings import Settings

CHUNK = 1024 * 1024


def blob_path(store: Path, sha256: str) -> Path:
    """Where the blob ``sha256`` (hex) is kept below ``store``."""
    return store / blob_key(sha256)


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
    store = blob_store(settings)
    size = store.size(sha256)
    if size is None:
        return None
    if size > max_bytes:
        raise too_large(size, settings)
    file = store.open(sha256)
    if file is None:
        return None
    with contextlib.closing(file):
        return file.read(max_bytes + 1)


def present(settings: Settings, sha256: str) -> bool:
    return blob_store(settings).has(sha256)


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
    blob_store(settings).put(sha, incoming.path)


def stored_blobs(settings: Settings) -> Iterator[tuple[str, float]]:
    """Each blob of the store (hex) and when it last changed (Unix time)."""
    return blob_store(settings).blobs()


def remove_blob(settings: Settings, sha256: str, changed_before: float) -> int:
    """Remove the blob unless it changed (was kept, or kept again: ``_keep`` touches it) at
    or after ``changed_before``; the bytes it took (0: it stays, or was gone)."""
    return blob_store(settings).remove(sha256, changed_before)
