"""Metric ingest: every attempt's metric records, from its cursor, into the database.

Load: the attempts with records to read (``services.metrics.sources``), in a read
transaction. Slow work: each one's new whole lines read from its file, outside any
transaction (``read_batch``). Apply: each attempt's points and its cursor in one short
transaction of its own, guarded by the position read from (``keep``); the attempts that
ended with nothing to read marked done together (``close_empty``). A pass every half
second (a tenth while ``hurried`` says points are awaited: an experiment's verdicts wait on
its trials' points), in a thread of its own beside the control thread; under a stream of
points it rests twice as long as its pass took.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gpupool.executors.base import Executor
from gpupool.loops.watch import Watch
from gpupool.scheduler.types import Clock
from gpupool.services import metrics
from gpupool.store.db import Database

INTERVAL_SECONDS = 0.5
# while an experiment is active: its verdicts wait on its trials' points, and a trial ranked
# too low at its rung runs on until its point is read (aim 1 of issue 26: ~2 epochs of 0.2 s)
HURRIED_SECONDS = 0.1
BATCH_BYTES = 1024**2  # read per attempt per pass: about 25,000 points, a short transaction
REST_FACTOR = 2.0  # after a pass that kept points: rest twice as long as it took
RECENT_SECONDS = 60.0  # attempts that ended this long before a pass are looked at again


class Ingest(Watch):
    """Reads every attempt's metric records into the database, every ``interval`` seconds,
    in a thread of its own; ``run_once`` does one pass (tests call it directly)."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        clock: Clock,
        interval: float = INTERVAL_SECONDS,
        batch_bytes: int = BATCH_BYTES,
        on_kept: Callable[[], None] | None = None,
        hurried: Callable[[], bool] | None = None,
    ) -> None:
        """``on_kept``: told after a pass that kept points or read an ended attempt to its
        end (the experiments' pipeline: a trial completes then). ``hurried``: asked after
        each pass whether points are awaited (the next pass then comes after
        ``HURRIED_SECONDS``, not ``interval``)."""
        self.db, self.executor, self.clock = db, executor, clock
        self.on_kept, self.hurried = on_kept, hurried
        self.batch_bytes = batch_bytes
        self.ingested = 0  # points, since the server started
        self._since = -math.inf  # the first pass looks at every attempt not read to its end
        self._busy = False  # the last pass kept points
        self._finished = 0  # attempts read to their end by the last pass
        super().__init__("gpupool-metrics", "the jobs' metrics", interval, look_first=True)

    def tick(self) -> int:
        self._busy = False
        kept = self.run_once()
        self._busy = kept > 0
        if (kept or self._finished) and self.on_kept is not None:
            self.on_kept()
        return kept

    def rest(self, took: float) -> float:
        # Under a stream of points, passes back to back would take the server's CPU (and
        # the database's write lock) from the scheduling cycle: rest a few times as long as
        # the pass took, so ingestion keeps to a share of the time.
        if self._busy:
            return REST_FACTOR * took
        hurried = self.hurried is not None and self.hurried()
        return min(self.interval, HURRIED_SECONDS) if hurried else self.interval

    def run_once(self) -> int:
        """One pass over every attempt with records to read; the points ingested."""
        now = self.clock.now()
        with self.db.reader() as session:
            sources = metrics.sources(session, self.executor, self._since)
        self._since = now - RECENT_SECONDS
        self._finished = 0
        kept, empty = 0, []
        for source in sources:
            batch = metrics.read_batch(source, self.batch_bytes)  # outside any transaction
            if metrics.nothing_ever(source, batch):
                empty.append(source)
            elif metrics.is_new(source, batch):
                kept += self._keep(source, batch)
        if empty:  # ended attempts that reported nothing (most, after an upgrade): at once
            with self.db.session() as session:
                metrics.close_empty(session, empty)
        return kept

    def _keep(self, source: metrics.Source, batch: metrics.Batch) -> int:
        with self.db.session() as session:
            if not metrics.keep(session, source, batch):
                return 0
        self._finished += metrics.finished(source, batch)
        self.ingested += len(batch.points)
        return len(batch.points)
