"""Ingesting jobs' metrics: each attempt's records file into ``job_metrics``, with a cursor.

The runner of each attempt appends the points it kept to a records file (``[name, step, time,
value]`` per line; on a Ray node the executor copies it to the server with the log). An ingest
pipeline (``gpupool.loops.ingest``), in a thread of its own (never on the scheduling path), reads
each running or just-ended attempt's file from its cursor, whole lines only (``read_batch``), and
inserts the points and moves the cursor in one short transaction (``keep``): a server killed at any
moment has either kept a batch and its cursor or neither, so a restart neither loses nor repeats a
point. An attempt's cursor is ``done`` once the attempt had ended before a read that found nothing
more: its runner writes the last points before it records the exit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import and_, insert, or_, select
from sqlalchemy.orm import Session

from gpupool.executors.base import Executor, Handle
from gpupool.store.models import AttemptModel, JobMetricModel, MetricCursorModel

ACTIVE = ("starting", "running", "orphaned")
MAX_NAME = 100


@dataclass(frozen=True)
class Source:
    """One attempt to read: where its records are, from where, and whether it had ended
    (so that nothing more will come) before the read."""

    job_id: int
    attempt: int
    path: Path
    position: int
    ended: bool
    known: bool = True  # it has a cursor (else the first pass that sees it makes one)


@dataclass(frozen=True)
class Batch:
    points: list[dict[str, Any]]
    end: int  # the position after the whole lines read
    eof: bool  # nothing more in the file past ``end`` for now


def sources(session: Session, executor: Executor, since: float) -> list[Source]:
    """Attempts launched and not read to their end that run, ended since ``since``, or
    were read in part (all of them when ``since`` is -inf: a server's first pass)."""
    cursor = MetricCursorModel
    joined = and_(cursor.job_id == AttemptModel.job_id, cursor.attempt == AttemptModel.number)
    base = (
        select(AttemptModel, cursor)
        .outerjoin(cursor, joined)
        .where(AttemptModel.executor_state.is_not(None), or_(cursor.done.is_(None), ~cursor.done))
    )
    if math.isinf(since):
        rows = list(session.execute(base))
    else:
        lately = or_(AttemptModel.status.in_(ACTIVE), AttemptModel.ended_at >= since)
        rows = list(session.execute(base.where(lately)))
        rows += list(session.execute(base.where(cursor.done.is_(False))))
    found = {(a.job_id, a.number): _source(executor, a, c) for a, c in rows}
    return list(found.values())


def _source(executor: Executor, row: AttemptModel, cursor: MetricCursorModel | None) -> Source:
    handle = executor.load_state(row.executor_state)
    path = executor.metrics_path(handle) if isinstance(handle, Handle) else Path()
    ended = row.status not in ACTIVE
    position = cursor.position if cursor else 0
    return Source(row.job_id, row.number, path, position, ended, cursor is not None)


def close_empty(session: Session, sources: list[Source]) -> None:
    """Mark done, in two statements, the attempts that ended without a point to read: the
    cursors that exist are read at once, the others inserted at once (one that exists was
    made by a pass that read points: it is left as it is)."""
    cursors = MetricCursorModel.__table__
    keys = {(source.job_id, source.attempt) for source in sources}
    found = session.execute(
        select(cursors.c.job_id, cursors.c.attempt).where(
            cursors.c.job_id.in_({job_id for job_id, _ in keys})
        )
    )
    missing = keys - {tuple(row) for row in found}
    if missing:
        session.execute(
            insert(cursors),
            [
                {"job_id": job_id, "attempt": attempt, "position": 0, "done": True}
                for job_id, attempt in sorted(missing)
            ],
        )


def is_new(source: Source, batch: Batch) -> bool:
    """Whether a read from ``source`` has anything to keep: new points, the attempt's end,
    or the cursor of an attempt seen for the first time (it is then read to its end
    whenever it ends, whatever time its end is recorded with)."""
    return batch.end != source.position or finished(source, batch) or not source.known


def finished(source: Source, batch: Batch) -> bool:
    """The attempt had ended before the read, and the read reached the end of its records."""
    return source.ended and batch.eof


def keep(session: Session, source: Source, batch: Batch) -> bool:
    """Insert the points and move the cursor, guarded by the position read from; False
    when another pass moved it (what was read is kept already)."""
    key = (source.job_id, source.attempt)
    cursor = session.get(MetricCursorModel, key)
    if cursor is None:
        cursor = MetricCursorModel(job_id=source.job_id, attempt=source.attempt, position=0)
        session.add(cursor)
    if cursor.position != source.position or cursor.done:
        return False
    if batch.points:
        session.execute(insert(JobMetricModel.__table__), batch.points)  # Core: fast
    cursor.position, cursor.done = batch.end, finished(source, batch)
    return True


def nothing_ever(source: Source, batch: Batch) -> bool:
    """An attempt that ended with nothing read, and nothing to read, ever."""
    return source.ended and source.position == 0 and batch.end == 0 and batch.eof


def read_batch(source: Source, limit: int) -> Batch:
    """The whole lines of the records from ``source.position`` (up to ``limit`` bytes, at
    least one line), as rows for ``job_metrics``. A line that is not a point is skipped
    (the runner writes only points; a torn last line waits for its end)."""
    try:
        with source.path.open("rb") as handle:
            handle.seek(source.position)
            data = handle.read(limit + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return Batch([], source.position, True)
    more = len(data) > limit
    end = data.rfind(b"\n", 0, limit)
    if end < 0 and more:
        end = data.find(b"\n")
    whole = data[: end + 1] if end >= 0 else b""
    if source.ended and not more and end + 1 < len(data):
        whole = data  # the runner has ended: a last line without its newline is whole
    rows = [_row(source, p) for p in _parse(whole.splitlines())]
    points = [row for row in rows if row is not None]
    return Batch(points, source.position + len(whole), not more and len(whole) == len(data))


def _parse(lines: list[bytes]) -> list[Any]:
    """Every line's JSON, in one parse of them all (a line that is not JSON: None)."""
    lines = [line for line in lines if line.strip()]
    try:
        return json.loads(b"[" + b",".join(lines) + b"]")
    except ValueError:  # some line is torn or junk: each on its own
        return [_loads(line) for line in lines]


def _loads(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _row(source: Source, point: Any) -> dict[str, Any] | None:
    """A row of ``job_metrics`` from ``[name, step, time, value]``; None for anything else."""
    if not isinstance(point, list) or len(point) != 4:
        return None
    name, step, at, value = point
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        return None
    if step is not None and (type(step) is not int or step < 0):
        return None
    if not (_finite(at) and _finite(value)):
        return None
    return {
        "job_id": source.job_id,
        "attempt": source.attempt,
        "name": name,
        "step": step,
        "at": float(at),
        "value": float(value),
    }


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
