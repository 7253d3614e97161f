"""Re-adoption, once at start: every attempt that was launched and not yet seen ending is
taken back into the active table, so that a server killed with -9 loses no running work.

An attempt recorded but never launched (the server died between its claim and its launch)
is recovered by the executor if it did start, else ended as ``never_launched`` and its job
requeued: at most once, never lost.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select

from gpupool.domain.jobs import JobSpec, Reason, StopReason
from gpupool.executors.base import Executor
from gpupool.executors.task import Observed
from gpupool.loops.active import ActiveAttempt, ActiveAttempts
from gpupool.scheduler.types import Clock
from gpupool.services import jobs as job_service
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel, JobModel

ACTIVE_ATTEMPT = ("starting", "running", "orphaned")


class Readopt:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        executor: Executor,
        actives: ActiveAttempts,
        grace: Callable[[JobSpec], float],
    ) -> None:
        self.db, self.clock, self.executor = db, clock, executor
        self.actives, self.grace = actives, grace

    def run(self) -> None:
        with self.db.session() as session:
            rows = session.scalars(
                select(AttemptModel).where(AttemptModel.status.in_(ACTIVE_ATTEMPT))
            ).all()
            for row in rows:
                self._one(session, row)

    def _one(self, session, row: AttemptModel) -> None:  # noqa: ANN001
        if row.executor_state:
            handle = self.executor.load_state(row.executor_state)
        else:  # recorded, then the server died before it could record the launch
            handle = self.executor.recover(row.job_id, row.number, row.node)
        if handle is None:
            row.status, row.ended_at = "never_launched", self.clock.now()
            job = session.get(JobModel, row.job_id)
            message = f"attempt {row.number} never launched; requeued"
            job_service.requeue(session, job, self.clock.now(), message)
            return
        row.executor_state = self.executor.get_state(handle)
        observed = {"running": Observed.RUNNING, "orphaned": Observed.ORPHANED}.get(
            row.status, Observed.STARTING
        )
        spec = JobSpec.stored(session.get(JobModel, row.job_id).spec)
        self.actives.add(
            ActiveAttempt(
                row.id,
                row.job_id,
                row.number,
                handle,
                observed,
                grace=self.grace(spec),
                max_runtime=spec.max_runtime_seconds,
                started_at=row.started_at,
                stop_reason=StopReason(row.stop_reason) if row.stop_reason else None,
            )
        )  # a stop recorded before the restart is sent again: stop() is idempotent
        job_service.record(
            session,
            row.job_id,
            self.clock.now(),
            Reason.READOPTED,
            f"server restarted; attempt {row.number} re-adopted on {row.node}",
        )
