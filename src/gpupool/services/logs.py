"""Reading a job's log: one log per attempt, byte offsets, whole UTF-8 characters only.

A preempted job runs again as a new attempt with a new log that starts at byte 0. A reader
that follows a job reads each attempt's log to its end, then moves to the next attempt that
has one (``LogPlace.next_attempt``), announced by ``LogPlace.note``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import StopReason
from gpupool.errors import NotFound, OffsetOutOfRange
from gpupool.executors.base import Executor
from gpupool.store.models import AttemptModel

MAX_CHUNK = 1024**2


@dataclass(frozen=True)
class Chunk:
    attempt: int | None
    offset: int
    next_offset: int
    text: str


@dataclass(frozen=True)
class LogPlace:
    """Where one attempt's log is: its number (None: no attempt launched yet), its file (None:
    nothing written), the next attempt that has a log (None: none yet; once there is one, this
    log is complete) and a line announcing this attempt (None for the first), e.g. "attempt 2
    started (requeued after preemption)"."""

    attempt: int | None
    path: Path | None
    next_attempt: int | None
    note: str | None


def locate(session: Session, executor: Executor, job_id: int, attempt: int | None) -> LogPlace:
    """The log of the given attempt (default: the latest one that was launched)."""
    launched = _launched(session, job_id)
    if attempt is None:
        attempt = launched[-1].number if launched else None
    row = next((r for r in launched if r.number == attempt), None)
    path = executor.log_path(executor.load_state(row.executor_state)) if row else None
    later = [r.number for r in launched if attempt is not None and r.number > attempt]
    return LogPlace(attempt, path, later[0] if later else None, _note(session, job_id, row))


def check_attempt(job_id: int, attempts: int, attempt: int | None) -> None:
    """Refuse an attempt the job has not had (attempt 1 is always there to ask for: a reader
    that waits for a job to start reads it)."""
    if attempt is not None and attempt > max(attempts, 1):
        had = f"it has had {attempts}" if attempts else "it has not started yet"
        raise NotFound(f"job {job_id} has no attempt {attempt} ({had})")


def _launched(session: Session, job_id: int) -> list[AttemptModel]:
    """The job's attempts that were launched (only those have a log), oldest first."""
    query = select(AttemptModel).where(
        AttemptModel.job_id == job_id, AttemptModel.executor_state.is_not(None)
    )
    return list(session.scalars(query.order_by(AttemptModel.number)))


def _note(session: Session, job_id: int, row: AttemptModel | None) -> str | None:
    """Why this attempt runs: what became of the one before it."""
    if row is None or row.number <= 1:
        return None
    query = select(AttemptModel).where(
        AttemptModel.job_id == job_id, AttemptModel.number == row.number - 1
    )
    before = session.scalars(query).first()
    return f"attempt {row.number} started ({_requeued_because(before)})"


def _requeued_because(before: AttemptModel | None) -> str:
    if before is None:
        return "requeued"
    if before.stop_reason == StopReason.PREEMPTED:
        return "requeued after preemption"
    if before.status == "launch_failed":
        return f"requeued: attempt {before.number} could not be launched"
    if before.started_at is None:
        return f"requeued: attempt {before.number} never started"
    return f"requeued after attempt {before.number} ended"


def read_chunk(
    path: Path | None, attempt: int | None, offset: int, limit: int = MAX_CHUNK
) -> Chunk:
    """Up to ``limit`` bytes from ``offset``, cut at a whole character. An offset past the
    end of the log is refused (OffsetOutOfRange, 416, with the log's size): a log only grows,
    so a reader that goes on from each ``next_offset`` never asks for one."""
    size = _size(path)
    if offset > size:
        raise OffsetOutOfRange(
            f"offset {offset} is past the end of this log ({size} bytes so far): read from an "
            f"offset between 0 and {size}",
            size=size,
            attempt=attempt,
        )
    if path is None or offset == size:
        return Chunk(attempt, offset, offset, "")
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read(min(limit, MAX_CHUNK))
    data = _whole_characters(data)
    return Chunk(attempt, offset, offset + len(data), data.decode("utf-8", errors="replace"))


def _size(path: Path | None) -> int:
    """The log's size so far: 0 before its first byte (no file yet)."""
    try:
        return path.stat().st_size if path is not None else 0
    except FileNotFoundError:
        return 0


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
