"""Jobs', attempts', events' and arrays' rows turned into read models (``gpupool.domain.views``).

Each function reads only what its row has loaded or can load, so services call them while
their transaction is open; what they return holds no row and loads nothing later.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.domain.jobs import JobKind, JobStatus
from gpupool.domain.views import ArrayView, AttemptView, EventView, JobView, PlacementView
from gpupool.domain.waiting import PendingReason
from gpupool.store.models import AttemptModel, EventModel, JobArrayModel, JobModel, TeamModel


def job_view(
    job: JobModel, now: float, waiting: PendingReason | None = None, user: str | None = None
) -> JobView:
    """``now``: up to when a running attempt's GPU time counts as attained; ``waiting``: the
    scheduler's latest word on it; ``user``: the owner's name when the caller knows it
    (saves loading the user)."""
    # held since the scheduler's word: it has no place in the queue
    pending = job.status == JobStatus.PENDING and waiting is not None and not job.held
    return JobView(
        id=job.id,
        name=job.name,
        user=user or job.user.name,
        team=team_label(job.team),
        status=JobStatus(job.status),
        priority=job.priority,
        spec=job.spec,
        submitted_at=job.submitted_at,
        started_at=job.started_at,
        ended_at=job.ended_at,
        exit_code=job.exit_code,
        reason=job.reason,
        message=job.message,
        position=waiting.position if pending else None,
        blockers=list(waiting.blockers) if pending else [],
        attempts=job.attempts,
        cancel_requested=job.cancel_requested_at is not None,
        placement=PlacementView.model_validate(job.placement) if job.placement else None,
        preemptible=job.preemptible,
        attained_gpu_seconds=attained_gpu_seconds(job, now),
        queued_at=job.queued_at,
        checkpoint_at=job.checkpoint_at,
        preemptions=job.preemptions or 0,
        array_id=job.array_id,
        array_index=job.array_index,
        kind=job.kind or JobKind.JOB,
    )


def event_view(event: EventModel) -> EventView:
    return EventView(id=event.id, at=event.at, reason=event.reason, message=event.message)


def attempt_view(attempt: AttemptModel) -> AttemptView:
    return AttemptView.model_validate(attempt, from_attributes=True)


def array_view(array: JobArrayModel, first: JobModel, counts: Mapping[str, int]) -> ArrayView:
    """An array from its row, its first task (name, owner, team, spec) and its counts."""
    return ArrayView(
        id=array.id,
        name=first.name,
        user=first.user.name,
        team=team_label(first.team),
        spec=first.spec,
        submitted_at=array.submitted_at,
        indexes=array.indexes,
        size=array.size,
        max_running=array.max_running,
        counts=dict(counts),
    )


def attained_gpu_seconds(job: JobModel, now: float) -> float:
    """The GPU-seconds a job has received so far: its earlier attempts' (added to
    ``job.attained`` when each was requeued) and its current or last attempt's, counted up to
    ``now`` while it runs."""
    counted = job.attained or 0.0
    if job.started_at is None or (job.queued_at is not None and job.queued_at >= job.started_at):
        return counted  # it has not run since it was last (re)queued
    end = job.ended_at if job.ended_at is not None else now
    return counted + (job.gpus or 0.0) * max(0.0, end - job.started_at)


def team_label(team: TeamModel) -> str:
    """A team's name as jobs show it: 'ml (deleted)' for a deleted team, whose name a new
    team may have taken since."""
    return team.name if team.deleted_at is None else f"{team.name} (deleted)"
