"""Reconcile: what the executor observes of every active attempt, recorded.

Load: the active attempts (in memory) and one ``poll_all`` of the executor, outside any
transaction. Apply: every attempt whose state changed, in one transaction, by the jobs
capability's rules (``services.jobs.apply_transition``). Only once that commits are the
attempts marked as observed, so a pass that fails (a full disk) is redone by the next.
"""

from __future__ import annotations

from sqlalchemy import select

from gpupool.domain.jobs import JobStatus
from gpupool.executors.base import Executor
from gpupool.executors.task import Observed
from gpupool.loops.active import ActiveAttempt, ActiveAttempts
from gpupool.scheduler.types import Clock
from gpupool.services import jobs as job_service
from gpupool.services.core import LoopStats
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel, JobModel

ENDED = (Observed.EXITED, Observed.LOST)


class Reconcile:
    """Polls every active attempt and records all that changed in one transaction."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        executor: Executor,
        actives: ActiveAttempts,
        stats: LoopStats,
    ) -> None:
        self.db, self.clock, self.executor = db, clock, executor
        self.actives, self.stats = actives, stats

    def run(self) -> bool:
        """One pass; True if some attempt changed state."""
        actives = list(self.actives)
        seen = zip(actives, self.executor.poll_all([a.handle for a in actives]), strict=True)
        changed = [
            (active, result) for active, result in seen if result.observed != active.observed
        ]
        if not changed:
            return False
        now = self.clock.now()
        started: dict[int, float | None] = {}
        outcomes: dict[int, str] = {}  # the job's status once the attempt's change is recorded
        with self.db.session() as session:
            attempts, jobs = _rows(session, [active for active, _ in changed])
            for active, result in changed:
                attempt = attempts[active.attempt_id]
                if attempt.executor_state is None:
                    attempt.executor_state = self.executor.get_state(active.handle)
                job_service.apply_transition(session, attempt, jobs[active.job_id], result, now)
                started[active.attempt_id] = attempt.started_at
                outcomes[active.attempt_id] = jobs[active.job_id].status
        for active, result in changed:  # committed: only now is it observed
            active.observed, active.started_at = result.observed, started[active.attempt_id]
            if result.observed in ENDED:
                self.actives.forget(active)
                self.stats.ended(outcome(outcomes[active.attempt_id]))
        return True


def _rows(
    session,  # noqa: ANN001
    actives: list[ActiveAttempt],
) -> tuple[dict[int, AttemptModel], dict[int, JobModel]]:
    attempt_ids = [active.attempt_id for active in actives]
    job_ids = [active.job_id for active in actives]
    attempts = session.scalars(select(AttemptModel).where(AttemptModel.id.in_(attempt_ids)))
    jobs = session.scalars(select(JobModel).where(JobModel.id.in_(job_ids)))
    return {a.id: a for a in attempts}, {j.id: j for j in jobs}


def outcome(job_status: str) -> str:
    """How an attempt ended, for /metrics: its job's status, or ``requeued``."""
    final = JobStatus(job_status).is_final
    return job_status if final else "requeued"
