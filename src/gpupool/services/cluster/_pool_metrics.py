"""The pool's state for Prometheus, read at scrape time: GPUs in use by team, pending jobs by
reason, and what the control loop counted (job starts and ends, scheduling cycle times)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from gpupool.domain.jobs import JobStatus, Reason
from gpupool.services.core import StatsSnapshot, Tells
from gpupool.store.models import JobModel, TeamModel

HOLDING = (JobStatus.STARTING.value, JobStatus.RUNNING.value)
NO_REASON = Reason.QUEUED.value  # a pending job no cycle has explained yet


@dataclass(frozen=True)
class PoolMetrics:
    gpus_in_use: dict[str, float]  # team -> GPUs its starting and running jobs hold
    jobs: dict[str, int]  # status -> jobs (not the final ones)
    pending: dict[str, int]  # PendingReason code -> pending jobs
    loop: StatsSnapshot


def read(ctx: Tells) -> PoolMetrics:
    """What /metrics exports, read in one short transaction."""
    with ctx.db.reader() as session:
        in_use = session.execute(
            select(TeamModel.name, func.sum(JobModel.gpus))
            .join(TeamModel, TeamModel.id == JobModel.team_id)
            .where(JobModel.status.in_(HOLDING))
            .group_by(TeamModel.name)
        )
        gpus = {team: float(total or 0) for team, total in in_use}
        active = [s.value for s in JobStatus if not s.is_final]
        counts = session.execute(
            select(JobModel.status, func.count())
            .where(JobModel.status.in_(active))
            .group_by(JobModel.status)
        )
        jobs = {status: count for status, count in counts}
        reasons = session.execute(
            select(JobModel.reason, func.count())
            .where(JobModel.status == JobStatus.PENDING.value)
            .group_by(JobModel.reason)
        )
        pending = {reason or NO_REASON: count for reason, count in reasons}
    return PoolMetrics(gpus, jobs, pending, ctx.loop.stats.snapshot())
