"""Dependencies: jobs that wait for others are queued or cancelled once those end.

Load: what the waiting jobs' dependencies call for (``services.jobs.plan_dependencies``), in
a read transaction: one query, over the waiting jobs only. Apply: only when something
changes, in one transaction of conditional updates; a job cancelled because the job it
waited for ended badly may settle its own waiters, so it plans again until nothing changes.
Run by the driver before each scheduling cycle: a job that ends (reconcile saw it) or is
cancelled (the API woke the driver) releases its waiters in the same pass.
"""

from __future__ import annotations

from gpupool.scheduler.types import Clock
from gpupool.services import jobs as job_service
from gpupool.store.db import Database

MAX_ROUNDS = 100  # a chain of jobs cancelled one after the other, a link a round


class Dependencies:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    def run(self) -> job_service.DependenciesSettled:
        """Settle the waiting jobs; what was queued and cancelled."""
        queued: list[int] = []
        cancelled: list[int] = []
        for _ in range(MAX_ROUNDS):
            with self.db.reader() as session:
                steps = job_service.plan_dependencies(session)
            if not steps:
                break
            with self.db.session() as session:
                done = job_service.settle_dependencies(session, steps, self.clock.now())
            queued += done.queued
            cancelled += done.cancelled
            if not done.cancelled:
                break
        return job_service.DependenciesSettled(tuple(queued), tuple(cancelled))
