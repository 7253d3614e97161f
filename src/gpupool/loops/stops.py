"""Stops: attempts gpupool ends itself — a cancel, a max runtime, a preemption, a stop
another thread recorded (the storage watch: a team over its quota).

Load: the cancelled jobs (when the loop was woken, as a cancel does, or a second passed)
and, when told, the stops recorded by another thread. Apply: every
new stop in one transaction (``services.jobs.record_stop``: guarded, first reason wins),
then, outside it, the executor's ``stop`` — recorded first, so that the attempt's end is read
the way the stop meant it. A stop is sent once per attempt; after a restart, a recorded stop
is sent again (``stop`` is idempotent).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from sqlalchemy import select

from gpupool.domain.jobs import StopReason
from gpupool.executors.base import Executor
from gpupool.loops.active import ActiveAttempt, ActiveAttempts
from gpupool.scheduler.types import Clock, Preemption
from gpupool.services import cluster as cluster_service
from gpupool.services import jobs as job_service
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel, JobModel

# A cancel always wakes the loop (``look_for_cancels``); the jobs are read for cancels at
# least this often all the same, in case a cancel reached the database some other way.
CANCEL_CHECK_SECONDS = 1.0


class Stops:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        executor: Executor,
        actives: ActiveAttempts,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db, self.clock, self.executor, self.actives = db, clock, executor, actives
        self.monotonic = monotonic
        # set by another thread (the storage watch) that recorded stops in the database
        self._recorded_elsewhere = threading.Event()
        # counted by whoever wakes the loop (a cancel among them); the count the last reading
        # of the cancels answered, once its stops were recorded, and when
        self._lock = threading.Lock()
        self._asked = 0
        self._answered = 0
        self._answered_at = -math.inf

    def look_for_cancels(self) -> None:
        """A job may have been cancelled (the loop was woken): read the cancels next pass."""
        with self._lock:
            self._asked += 1

    def recorded_elsewhere(self) -> None:
        """Stops were recorded on attempts by another thread: read them at the next pass."""
        self._recorded_elsewhere.set()

    def run(self) -> None:
        """Stop attempts of cancelled jobs and attempts past their job's max runtime; send
        stops recorded but not sent yet (by another thread, or before a restart)."""
        now = self.clock.now()
        if self._recorded_elsewhere.is_set():
            self._recorded_elsewhere.clear()
            self._read_recorded()
        if not len(self.actives):
            return
        asked = self._asked
        due = asked != self._answered or (
            self.monotonic() - self._answered_at >= CANCEL_CHECK_SECONDS
        )
        cancelled = self._cancelled_jobs() if due else set()
        requests = []
        for active in self.actives:
            if active.stop_sent:
                continue
            if active.job_id in cancelled:
                requests.append(job_service.cancelled(active.attempt_id, active.job_id))
            elif active.past_max_runtime(now):
                requests.append(
                    job_service.past_max_runtime(
                        active.attempt_id, active.job_id, active.max_runtime, active.grace
                    )
                )
            elif active.stop_reason is not None:
                self._send(active)
        self.stop(requests)
        if due:  # recorded and sent: a pass that failed before reads the cancels again
            self._answered, self._answered_at = asked, self.monotonic()

    def preempt(self, preemptions: list[Preemption]) -> None:
        """Stop each preempted job's attempts; they are requeued when they end."""
        by_job = self.actives.by_job()
        self.stop(
            [
                job_service.preempted(active.attempt_id, preemption)
                for preemption in preemptions
                for active in by_job.get(preemption.job_id, ())
                if not active.stop_sent
            ]
        )

    def stop(self, requests: list[job_service.StopRequest]) -> None:
        """Record every stop in one transaction, then ask the executor."""
        if not requests:
            return
        now = self.clock.now()
        with self.db.session() as session:
            recorded = [
                request for request in requests if job_service.record_stop(session, request, now)
            ]
        for request in recorded:
            self.actives[request.attempt_id].stop_reason = request.reason
        for request in requests:
            self._send(self.actives[request.attempt_id])

    def _send(self, active: ActiveAttempt) -> None:
        self.executor.stop(active.handle, active.grace)
        active.stop_sent = True

    def _read_recorded(self) -> None:
        with self.db.reader() as session:
            rows = session.execute(
                select(AttemptModel.id, AttemptModel.stop_reason).where(
                    AttemptModel.id.in_(self.actives.ids()),
                    AttemptModel.stop_reason.is_not(None),
                )
            ).all()
        for attempt_id, reason in rows:
            active = self.actives.get(attempt_id)
            if active is not None and active.stop_reason is None:
                active.stop_reason = StopReason(reason)

    def _cancelled_jobs(self) -> set[int]:
        """The active attempts' jobs that a cancel was asked for (read by their ids: the
        cost does not grow with the jobs table)."""
        job_ids = list({active.job_id for active in self.actives})
        with self.db.reader() as session:
            return set(
                session.scalars(
                    select(JobModel.id).where(
                        JobModel.id.in_(job_ids),
                        JobModel.cancel_requested_at.is_not(None),
                        JobModel.status.in_(cluster_service.ACTIVE),
                    )
                )
            )
