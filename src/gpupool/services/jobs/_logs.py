"""Reading a job's log: one log per attempt, byte offsets, whole UTF-8 characters only.

A preempted job runs again as a new attempt with a new log that starts at byte 0. A reader
that follows a job reads each attempt's log to its end, then moves to the next attempt that
has one (``LogPlace.next_attempt``), announced by ``LogPlace.note``.

A distributed job's log merges its ranks' lines, each prefixed ``[rank N] `` (or ``[task N] ``
for a task's merged stream; see ``gpupool.domain.ranklogs``). A reader may ask for one rank's
or one task's lines (:class:`LineFilter`): offsets stay byte offsets of the whole log, a
chunk then holds whole lines only (a last line still being written waits for its end, unless
the log will not grow), and its text is the chosen lines without their prefix. A chunk may so
move ``next_offset`` on with no text: a reader goes on from ``next_offset`` as always, and has
read everything once ``next_offset`` stops moving."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import gpupool.services.jobs._jobs as jobs
from gpupool.domain.jobs import JobStatus, StopReason
from gpupool.domain.ranklogs import rank_label, select_lines, task_label
from gpupool.domain.views import JobStateView, LogChunkView
from gpupool.errors import InvalidRequest, NotFound, OffsetOutOfRange
from gpupool.executors.base import Executor
from gpupool.services.core import Principal
from gpupool.services.jobs._ports import LogReads
from gpupool.store.models import AttemptModel

MAX_CHUNK = 1024**2
MAX_RANK = 1_000_000  # beyond any job's ranks (MAX_NODES x GPUs of a node)


@dataclass(frozen=True)
class LineFilter:
    """Only the lines of one rank (``[rank N] ``) or of one task (``[task N] ``) of a
    distributed job's log; neither: every line, as written."""

    rank: int | None = None
    task: int | None = None

    def __post_init__(self) -> None:
        if self.rank is not None and self.task is not None:
            raise InvalidRequest(
                "ask for one rank's lines (rank) or one task's (task), not both", field="rank"
            )

    @property
    def label(self) -> str | None:
        """The prefix's label to keep (``rank 3``), None for every line."""
        if self.rank is not None:
            return rank_label(self.rank)
        return None if self.task is None else task_label(self.task)


EVERY_LINE = LineFilter()


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


@dataclass
class LogCursor:
    """Where a reader that follows a job's logs stands; the reader owns it, ``follow_step``
    moves it. ``attempt`` None: the latest, until one is known."""

    job_id: int
    attempt: int | None
    offset: int
    follow: bool
    lines: LineFilter = EVERY_LINE
    announced: int | None = None  # the attempt whose log was last announced
    state: JobStateView | None = None  # the job's state, as last told


@dataclass(frozen=True)
class LogStep:
    """What one step of following a log has to tell: ``events`` as (name, data) pairs
    (``attempt``, ``log``, ``status``, ``end``); ``done``: nothing will follow; ``idle``:
    nothing new, so wait a moment before the next step."""

    events: list[tuple[str, dict[str, Any]]]
    done: bool = False
    idle: bool = False


# -- what the API calls ------------------------------------------------------------------------


def read_log(
    ctx: LogReads,
    who: Principal,
    job_id: int,
    attempt: int | None,
    offset: int,
    limit: int,
    lines: LineFilter = EVERY_LINE,
) -> LogChunkView:
    """One attempt's log (None: the latest) from ``offset``, only the ``lines`` asked for;
    ``next_attempt`` says where a reader that follows the job goes once this log is read to
    its end."""
    chunk, place, final = _read(ctx, who, job_id, attempt, offset, limit, lines)
    complete = final and place.next_attempt is None and chunk.next_offset == chunk.offset
    return LogChunkView(
        job_id=job_id,
        complete=complete,
        next_attempt=place.next_attempt,
        note=place.note,
        **chunk.__dict__,
    )


def open_log(
    ctx: LogReads,
    who: Principal,
    job_id: int,
    attempt: int | None,
    offset: int,
    follow: bool,
    lines: LineFilter = EVERY_LINE,
) -> LogCursor:
    """A cursor at ``offset`` of the attempt's log, once the job, the attempt and the offset
    are known good (NotFound, OffsetOutOfRange before anything is streamed)."""
    _read(ctx, who, job_id, attempt, offset, 1)
    return LogCursor(job_id, attempt, offset, follow, lines)


def follow_step(ctx: LogReads, who: Principal, at: LogCursor) -> LogStep:
    """Read on from ``at`` and move it: the attempt when it is new, the text read, the job's
    state when it changed; with ``follow``, on to each later attempt from its start; ``end``
    once the log read will not grow any more. A ``log`` event comes whenever the offset moves,
    with empty text when the cursor's filter left every line read out."""
    chunk, place, final = _read(ctx, who, at.job_id, at.attempt, at.offset, MAX_CHUNK, at.lines)
    events: list[tuple[str, dict[str, Any]]] = []
    at.attempt = place.attempt  # kept once known: a new attempt's log starts at 0
    if place.attempt is not None and place.attempt != at.announced:
        events.append(("attempt", {"attempt": place.attempt, "note": place.note}))
        at.announced = place.attempt
    moved = chunk.next_offset != chunk.offset
    if moved:
        data = {"attempt": chunk.attempt, "offset": chunk.offset, "text": chunk.text}
        events.append(("log", data | {"next_offset": chunk.next_offset}))
        at.offset = chunk.next_offset
    state = jobs.job_state(ctx, who, at.job_id)
    if state != at.state:
        events.append(("status", state.model_dump(mode="json")))
        at.state = state
    if moved:
        return LogStep(events)
    if place.next_attempt is not None and at.follow:
        at.attempt, at.offset = place.next_attempt, 0
        return LogStep(events)
    if final or place.next_attempt is not None:
        events.append(("end", {"attempt": at.attempt, "next_offset": at.offset}))
        return LogStep(events, done=True)
    return LogStep(events, idle=True)


def _read(
    ctx: LogReads,
    who: Principal,
    job_id: int,
    attempt: int | None,
    offset: int,
    limit: int,
    lines: LineFilter = EVERY_LINE,
) -> tuple[Chunk, LogPlace, bool]:
    """A chunk of the attempt's log, where that log is, and whether the job has ended."""
    with ctx.db.reader() as session:
        job = jobs.get_job(session, who, job_id)
        check_attempt(job_id, job.attempts, attempt)
        final = JobStatus(job.status).is_final
        place = locate(session, ctx.executor, job_id, attempt)
    if lines.label is None:
        return read_chunk(place.path, place.attempt, offset, limit), place, final
    ends = final or place.next_attempt is not None  # this log will not grow any more
    chunk = read_lines(place.path, place.attempt, offset, limit, lines.label, ends)
    return chunk, place, final


# -- the steps ---------------------------------------------------------------------------------


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
    data = _whole_characters(_read_bytes(path, attempt, offset, min(limit, MAX_CHUNK)))
    return Chunk(attempt, offset, offset + len(data), data.decode("utf-8", errors="replace"))


def read_lines(
    path: Path | None, attempt: int | None, offset: int, limit: int, label: str, ends: bool
) -> Chunk:
    """The whole lines from ``offset`` (those that fit in ``limit`` bytes, at least one),
    only those ``label`` wrote, without their prefix. A last line without its end is left
    for a later read unless the log ``ends`` (will not grow), or the line is ``MAX_CHUNK``
    long already (it is then taken as a line of its own, as the rank merger does)."""
    data = _whole_lines(_read_bytes(path, attempt, offset, MAX_CHUNK), limit, ends)
    text = data.decode("utf-8", errors="replace")
    return Chunk(attempt, offset, offset + len(data), select_lines(text, label))


def _read_bytes(path: Path | None, attempt: int | None, offset: int, count: int) -> bytes:
    """Up to ``count`` bytes from ``offset``; an offset past the end is refused (416)."""
    size = _size(path)
    if offset > size:
        raise OffsetOutOfRange(
            f"offset {offset} is past the end of this log ({size} bytes so far): read from an "
            f"offset between 0 and {size}",
            size=size,
            attempt=attempt,
        )
    if path is None or offset == size:
        return b""
    with path.open("rb") as handle:
        handle.seek(offset)
        return handle.read(count)


def _whole_lines(data: bytes, limit: int, ends: bool) -> bytes:
    """``data`` up to the end of its last line within ``limit`` bytes (of its first line
    when that one is longer); the unterminated rest only when nothing more will come."""
    end = data.rfind(b"\n", 0, limit)
    if end < 0:
        end = data.find(b"\n")
    if end >= 0:
        return data[: end + 1]
    if len(data) >= MAX_CHUNK:
        return _whole_characters(data)
    return data if ends else b""


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
