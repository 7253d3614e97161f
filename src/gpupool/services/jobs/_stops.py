"""Stops gpupool asks for itself: a cancel, a preemption, a max runtime, a team over its
storage quota (inside a transaction).

A stop is recorded on the attempt (``stop_reason``) before the executor is asked, so that
when the attempt ends, whatever its exit code, ``transitions`` knows what it meant: a
preempted job goes back to the queue, one past its max runtime fails. The first reason
recorded wins; a cancel still wins over every other when the attempt ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.orm import Session

import gpupool.services.jobs._jobs as job_service
from gpupool.domain.jobs import JobStatus, Reason, StopReason
from gpupool.domain.units import format_duration
from gpupool.scheduler.types import Preemption
from gpupool.store.models import AttemptModel, JobModel

ACTIVE_ATTEMPT = ("starting", "running")
REQUEUED_MESSAGE = "requeued after preemption; resumes from $GPUPOOL_CHECKPOINT_DIR"


@dataclass(frozen=True)
class StopRequest:
    """One attempt to stop, why, and what its job's status line and events should say."""

    attempt_id: int
    job_id: int
    reason: StopReason
    code: Reason | None = None  # None: no event (the cancel has its own)
    message: str = ""


def record(session: Session, request: StopRequest, now: float) -> bool:
    """Set the attempt's stop reason unless one is set; True if this request set it."""
    done = session.execute(
        update(AttemptModel)
        .where(
            AttemptModel.id == request.attempt_id,
            AttemptModel.stop_reason.is_(None),
            AttemptModel.status.in_(ACTIVE_ATTEMPT),
        )
        .values(stop_reason=request.reason.value)
    )
    if not done.rowcount:
        return False
    if request.code is not None:
        _show_on_job(session, request)
        job_service.record(session, request.job_id, now, request.code, request.message)
    return True


def preempted(attempt_id: int, preemption: Preemption) -> StopRequest:
    """The scheduler's message: it says what the job yields to (another team's job by its
    team only, so that the victim's team never learns the id of a job it cannot see)."""
    return StopRequest(
        attempt_id, preemption.job_id, StopReason.PREEMPTED, Reason.PREEMPTED, preemption.message
    )


def past_max_runtime(attempt_id: int, job_id: int, limit: float, grace: float) -> StopRequest:
    message = (
        f"ran past its max runtime of {format_duration(limit)}: stopping it "
        f"(SIGTERM, then SIGKILL after {format_duration(grace)})"
    )
    return StopRequest(
        attempt_id, job_id, StopReason.MAX_RUNTIME, Reason.MAX_RUNTIME_EXCEEDED, message
    )


def over_storage_quota(attempt_id: int, job_id: int, message: str) -> StopRequest:
    """The storage watch's stop: its team's files are over its quota (or fill the disk)."""
    return StopRequest(
        attempt_id, job_id, StopReason.STORAGE_QUOTA, Reason.STORAGE_QUOTA_EXCEEDED, message
    )


def storage_ended_message(job: JobModel, code: int | None) -> str:
    """What a job stopped for its team's storage says when its attempt has ended (its
    status line said why while it stopped)."""
    why = job.message if job.reason == Reason.STORAGE_QUOTA_EXCEEDED.value else ""
    return f"{why or 'stopped: its team is over its storage quota'}; exit code {code}"


def stopped_early(attempt_id: int, job_id: int, message: str) -> StopRequest:
    """An experiment's verdict on its trial: it ranked too low at a rung."""
    return StopRequest(attempt_id, job_id, StopReason.EARLY_STOPPED, Reason.EARLY_STOPPED, message)


def early_message(job: JobModel, code: int | None) -> str:
    """What a trial stopped early says once its attempt has ended (the verdict, kept on its
    status line while it stopped)."""
    why = job.message if job.reason == Reason.EARLY_STOPPED.value else "stopped early"
    return f"{why}; exit code {code}"


def cancelled(attempt_id: int, job_id: int) -> StopRequest:
    return StopRequest(attempt_id, job_id, StopReason.CANCELLED)


def ended_message(job: JobModel, code: int | None) -> str:
    """What a job stopped for its max runtime says when its attempt has ended."""
    limit = (job.spec or {}).get("max_runtime_seconds")
    text = f"of {format_duration(limit)} " if limit else ""
    return f"stopped after its max runtime {text}(max_runtime_seconds); exit code {code}"


def _show_on_job(session: Session, request: StopRequest) -> None:
    """The job's status line says why it is stopping (it still runs until it ends)."""
    session.execute(
        update(JobModel)
        .where(
            JobModel.id == request.job_id,
            JobModel.status.in_((JobStatus.STARTING.value, JobStatus.RUNNING.value)),
        )
        .values(reason=request.code.value, message=request.message)
    )
