"""Reading a job's log: byte offsets, whole UTF-8 characters only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.executors.base import Executor
from gpupool.store.models import AttemptModel

MAX_CHUNK = 1024**2


@dataclass(frozen=True)
class Chunk:
    attempt: int | None
    offset: int
    next_offset: int
    text: str


def log_file(
    session: Session, executor: Executor, job_id: int, attempt: int | None
) -> tuple[int | None, Path | None]:
    """The log of the given attempt (default: the latest one that was launched)."""
    query = select(AttemptModel).where(
        AttemptModel.job_id == job_id, AttemptModel.executor_state.is_not(None)
    )
    if attempt is not None:
        query = query.where(AttemptModel.number == attempt)
    row = session.scalars(query.order_by(AttemptModel.number.desc()).limit(1)).first()
    if row is None:
        return attempt, None
    return row.number, executor.log_path(executor.load_state(row.executor_state))


def read_chunk(
    path: Path | None, attempt: int | None, offset: int, limit: int = MAX_CHUNK
) -> Chunk:
    if path is None or not path.exists():
        return Chunk(attempt, offset, offset, "")
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read(min(limit, MAX_CHUNK))
    data = _whole_characters(data)
    return Chunk(attempt, offset, offset + len(data), data.decode("utf-8", errors="replace"))


def _whole_characters(data: bytes) -> bytes:
    """Drop a UTF-8 sequence cut at the end; the next read starts with it."""
    for cut in range(1, min(4, len(data)) + 1):
        byte = data[-cut]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if cut >= need else data[:-cut]
    return data
