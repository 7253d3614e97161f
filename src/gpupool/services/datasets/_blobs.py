"""The dataset store on disk: each blob (a file's bytes, or a version's manifest) kept once,
at ``blobs/<first 2 hex>/<hex>`` below the store, named by its SHA-256.

A blob is received into a part file below ``incoming`` while its SHA-256 is computed,
checked against the name it was sent under, flushed to the disk (fsync), renamed into place
and its directory synced: only then is it recorded and acknowledged, so that an answered
upload survives kill -9 of the server or a crash of the machine. Kept blobs are read-only
(0444): nodes hard-link them into their caches, and the jobs' accounts read them there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from gpupool.domain.units import format_bytes
from gpupool.errors import BlobHashMismatch, DatasetTooLarge
from gpupool.services.jobs import Incoming
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


def _open(settings: Settings) -> Incoming:
    return Incoming.open(
        settings.datasets_dir / INCOMING,
        prefix="blob",
        max_bytes=settings.max_dataset_bytes,
        too_large=lambda size: too_large(size, settings),
        what="dataset storage",
    )


async def receive(settings: Settings, chunks: AsyncIterator[bytes], expected: str) -> int:
    """Receive the blob ``expected`` (hex) from ``chunks`` and keep it (once); its size.
    BlobHashMismatch when the bytes have another SHA-256; DatasetTooLarge past the limit."""
    with _open(settings) as incoming:
        async for chunk in chunks:
            incoming.write(chunk)
        await asyncio.to_thread(_keep, settings, incoming, expected)
        return incoming.size


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
    if not final.exists():  # else the same bytes, kept already: the part is discarded on exit
        incoming.publish(final)
    readable(final)


def readable(path: Path) -> None:
    """Make a kept blob 0444 (``Incoming.publish`` keeps it 0400): again each time it is
    received, so that a crash between the two leaves no blob only the server reads."""
    if path.stat().st_mode & 0o777 != 0o444:
        os.chmod(path, 0o444)
