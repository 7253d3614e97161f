"""Checkpoints: the newest checkpoint time of running attempts, stored.

Load: the running attempts due for a look (every few seconds each) and their checkpoint
directories' newest times, outside any transaction. Apply: the times that moved, in one
transaction (``services.jobs.CheckpointWatcher`` says how); marked once it commits.
"""

from __future__ import annotations

from gpupool.executors.task import Observed
from gpupool.loops.active import ActiveAttempts
from gpupool.scheduler.types import Clock
from gpupool.services.jobs import CheckpointWatcher
from gpupool.store.db import Database


class Checkpoints:
    def __init__(
        self, db: Database, clock: Clock, actives: ActiveAttempts, watcher: CheckpointWatcher
    ) -> None:
        self.db, self.clock, self.actives, self.watcher = db, clock, actives, watcher
        actives.on_forget.append(lambda attempt_id, _job_id: watcher.forget(attempt_id))

    def run(self) -> None:
        running = [a.watched() for a in self.actives if a.observed == Observed.RUNNING]
        seen = self.watcher.look(running)
        if seen:
            with self.db.session() as session:
                self.watcher.record(session, seen, self.clock.now())
            self.watcher.mark(seen)
