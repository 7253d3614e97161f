"""Why a job waits (or what it does instead): the answer of ``gpupool why`` and the job page.

A pending job gets the scheduler's latest word on it (reason code, message, position in its
team's queue, what blocks it) and an estimated start time from ``services.eta``. A job that
started or ended gets a plain sentence saying so: there is nothing to wait for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobStatus, Reason
from gpupool.scheduler.types import PendingReason
from gpupool.services.access import Principal
from gpupool.services.eta import Estimate, Forecast
from gpupool.store.models import JobModel

MAX_QUEUE = 500  # pending jobs listed at most (the first in queue order)

NOT_LOOKED_AT = "the scheduler has not looked at it yet; it does within a second or two"


@dataclass(frozen=True)
class Why:
    """The answer for one job; ``eta`` and ``eta_unknown`` only for a pending job."""

    job_id: int
    status: JobStatus
    summary: str
    code: str
    message: str
    position: int | None = None
    blockers: tuple[str, ...] = ()
    eta: float | None = None
    eta_unknown: str | None = None
    estimate: Estimate | None = None
    assumptions: Sequence[str] = field(default_factory=tuple)


def explain(
    job: JobModel,
    waiting: PendingReason | None,
    estimate: Estimate | None,
    assumptions: Sequence[str] = (),
) -> Why:
    """The answer for ``job``, from the scheduler's reason and the forecast's estimate."""
    status = JobStatus(job.status)
    if status is JobStatus.PENDING:
        return _pending(job, waiting, estimate, assumptions)
    code = job.reason or status.value
    message = job.message or ""
    return Why(job.id, status, _settled(job, status), code, message)


def _pending(
    job: JobModel,
    waiting: PendingReason | None,
    estimate: Estimate | None,
    assumptions: Sequence[str],
) -> Why:
    if job.cancel_requested_at is not None:
        return Why(job.id, JobStatus.PENDING, "it is being cancelled", "CancelRequested", "")
    if waiting is None:
        code = job.reason or Reason.SUBMITTED.value
        message = job.message or NOT_LOOKED_AT
        position, blockers = None, ()
    else:
        code, message = waiting.code.value, waiting.message
        position, blockers = waiting.position, waiting.blockers
    eta = estimate.at if estimate is not None else None
    unknown = estimate.unknown if estimate is not None else "no estimate was made"
    summary = f"it waits: {message}" if message else "it waits"
    return Why(
        job.id,
        JobStatus.PENDING,
        summary,
        code,
        message,
        position,
        tuple(blockers),
        eta,
        None if eta is not None else unknown,
        estimate,
        tuple(assumptions),
    )


def _settled(job: JobModel, status: JobStatus) -> str:
    """A sentence for a job that is not waiting."""
    node = f" on {job.node}" if job.node else ""
    if status is JobStatus.STARTING:
        return f"it is starting{node}: it does not wait any more"
    if status is JobStatus.RUNNING:
        return f"it is running{node}: it does not wait any more"
    if status is JobStatus.SUCCEEDED:
        return "it has ended: it succeeded"
    if status is JobStatus.FAILED:
        code = f" (exit code {job.exit_code})" if job.exit_code is not None else ""
        return f"it has ended: it failed{code}"
    if status is JobStatus.CANCELLED:
        return "it has ended: it was cancelled"
    return f"it has ended: {status.value}"


@dataclass(frozen=True)
class TeamQueue:
    """A team's pending jobs in queue order, each with its answer."""

    team: str
    jobs: list[tuple[JobModel, Why]]


def queue(
    session: Session,
    who: Principal,
    reasons: Mapping[int, PendingReason],
    forecast: Forecast | None,
    assumptions: Sequence[str] = (),
    limit: int = MAX_QUEUE,
) -> tuple[list[TeamQueue], int]:
    """The pending jobs of the teams ``who`` can see, by team (teams by name), in queue order
    (at most ``limit``: the first by position), and how many wait in all."""
    query = select(JobModel).where(JobModel.status == JobStatus.PENDING.value)
    if not who.is_admin:
        query = query.where(JobModel.team_id.in_(who.team_ids or {-1}))
    everyone = sorted(session.scalars(query), key=lambda job: _order(job, reasons))
    found = everyone[:limit]
    by_team: dict[str, list[tuple[JobModel, Why]]] = defaultdict(list)
    for job in found:
        estimate = forecast.estimate(job.id) if forecast is not None else None
        answer = explain(job, reasons.get(job.id), estimate, assumptions)
        by_team[job.team.name].append((job, answer))
    return [TeamQueue(team, by_team[team]) for team in sorted(by_team)], len(everyone)


def _order(job: JobModel, reasons: Mapping[int, PendingReason]) -> tuple:
    reason = reasons.get(job.id)
    position = reason.position if reason is not None else 1 << 30
    return (position, -job.priority, job.queued_at or job.submitted_at, job.id)
