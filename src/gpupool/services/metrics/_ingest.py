"""Ingesting jobs' metrics: each attempt's records file into ``job_metrics``, with a cursor.

The runner of each attempt appends the points it kept to a records file (``[name, step, time,
value]`` per line; on a Ray node the executor copies it to the server with the log). An
``Ingester``, in a thread of its own owned by the platform (never on the scheduling path),
reads each running or just-ended attempt's file from its cursor, whole lines only, and
inserts the points and moves the cursor in one short transaction: a server killed at any
moment has either kept a batch and its cursor or neither, so a restart neither loses nor
repeats a point. An attempt's cursor is ``done`` once the attempt had ended before a read
that found nothing more: its runner writes the last points before it records the exit.
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
from gpupool.scheduler.types import Clock
from gpupool.services.core import Watch
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel, JobMetricModel, MetricCursorModel

ACTIVE = ("starting", "running", "orphaned")
INTERVAL_SECONDS = 0.5
BATCH_BYTES = 1024**2  # read per attempt per pass: about 25,000 points, a short transaction
REST_FACTOR = 2.0  # after a pass that kept points: rest twice as long as it took
RECENT_SECONDS = 60.0  # attempts that ended this long before a pass are looked at again
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


class Ingester(Watch):
    """Reads every attempt's metric records into the database, every ``interval`` seconds,
    in a thread of its own; ``run_once`` does one pass (tests call it directly)."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        clock: Clock,
        interval: float = INTERVAL_SECONDS,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        self.db, self.executor, self.clock = db, executor, clock
        self.batch_bytes = batch_bytes
        self.ingested = 0  # points, since the server started
        self._since = -math.inf  # the first pass looks at every attempt not read to its end
        self._busy = False  # the last pass kept points
        super().__init__("gpupool-metrics", "the jobs' metrics", interval, look_first=True)

    def tick(self) -> int:
        self._busy = False
        kept = self.run_once()
        self._busy = kept > 0
        return kept

    def rest(self, took: float) -> float:
        # Under a stream of points, passes back to back would take the server's CPU (and
        # the database's write lock) from the scheduling cycle: rest a few times as long as
        # the pass took, so ingestion keeps to a share of the time.
        return REST_FACTOR * took if self._busy else self.interval

    def run_once(self) -> int:
        """One pass over every attempt with records to read; the points ingested."""
        now = self.clock.now()
        with self.db.reader() as session:
            sources = self._sources(session, self._since)
        self._since = now - RECENT_SECONDS
        kept, empty = 0, []
        for source in sources:
            batch = read_batch(source, self.batch_bytes)  # outside any transaction
            if _nothing_ever(source, batch):
                empty.append(source)
            else:
                kept += self._ingest(source, batch)
        if empty:  # ended attempts that reported nothing (most, after an upgrade): at once
            self._close_empty(empty)
        return kept

    # -- what to read --------------------------------------------------------------------------

    def _sources(self, session: Session, since: float) -> list[Source]:
        """Attempts launched and not read to their end that run, ended since ``since``, or
        were read in part (all of them on the first pass)."""
        cursor = MetricCursorModel
        joined = and_(cursor.job_id == AttemptModel.job_id, cursor.attempt == AttemptModel.number)
        base = (
            select(AttemptModel, cursor)
            .outerjoin(cursor, joined)
            .where(
                AttemptModel.executor_state.is_not(None), or_(cursor.done.is_(None), ~cursor.done)
            )
        )
        if math.isinf(since):
            rows = list(session.execute(base))
        else:
            lately = or_(AttemptModel.status.in_(ACTIVE), AttemptModel.ended_at >= since)
            rows = list(session.execute(base.where(lately)))
            rows += list(session.execute(base.where(cursor.done.is_(False))))
        sources = {(a.job_id, a.number): self._source(a, c) for a, c in rows}
        return list(sources.values())

    def _source(self, row: AttemptModel, cursor: MetricCursorModel | None) -> Source:
        handle = self.executor.load_state(row.executor_state)
        path = self.executor.metrics_path(handle) if isinstance(handle, Handle) else Path()
        ended = row.status not in ACTIVE
        position = cursor.position if cursor else 0
        return Source(row.job_id, row.number, path, position, ended, cursor is not None)

    # -- reading and keeping -------------------------------------------------------------------

    def _close_empty(self, sources: list[Source]) -> None:
        """Mark done, in one transaction of two statements, the attempts that ended without a
        point to read: the cursors that exist are read at once, the others inserted at once
        (one that exists was made by a pass that read points: it is left as it is)."""
        cursors = MetricCursorModel.__table__
        keys = {(source.job_id, source.attempt) for source in sources}
        with self.db.session() as session:
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

    def _ingest(self, source: Source, batch: Batch) -> int:
        """Keep what was read from the cursor on, in one transaction."""
        finished = source.ended and batch.eof
        if batch.end == source.position and not finished and source.known:
            return 0  # nothing new (a new attempt gets its cursor at once: it is then
            # read to its end whenever it ends, whatever time its end is recorded with)
        with self.db.session() as session:
            if not self._keep(session, source, batch, finished):
                return 0
        self.ingested += len(batch.points)
        return len(batch.points)

    def _keep(self, session: Session, source: Source, batch: Batch, finished: bool) -> bool:
        """Insert the points and move the cursor, guarded by the position read from."""
        key = (source.job_id, source.attempt)
        cursor = session.get(MetricCursorModel, key)
        if cursor is None:
            cursor = MetricCursorModel(job_id=source.job_id, attempt=source.attempt, position=0)
            session.add(cursor)
        if cursor.position != source.position or cursor.done:
            return False  # another pass moved it: what was read is kept already
        if batch.points:
            session.execute(insert(JobMetricModel.__table__), batch.points)  # Core: fast
        cursor.position, cursor.done = batch.end, finished
        return True


def _nothing_ever(source: Source, batch: Batch) -> bool:
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
