"""How observed attempt states change job and attempt rows (inside a caller's transaction).

An attempt gpupool stopped itself ends by its ``stop_reason``: a preempted one sends its
job back to the queue, whatever the exit code; one past its max runtime fails the job. A
cancel wins over both.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import gpupool.services.jobs._jobs as job_service
import gpupool.services.jobs._stops as stops
from gpupool.domain.jobs import JobStatus, Reason, StopReason
from gpupool.executors.task import Observed, PollResult
from gpupool.runner.network import NO_EGRESS
from gpupool.store.models import AttemptModel, JobModel


def apply(
    session: Session, attempt: AttemptModel, job: JobModel, result: PollResult, now: float
) -> None:
    """Record one observation; an attempt seen ending before it was seen running gets both."""
    if attempt.started_at is None and (
        result.observed == Observed.RUNNING
        or (result.started_at and result.observed != Observed.STARTING)
    ):
        started(session, attempt, job, result.started_at or now, result.notes)
    if result.observed == Observed.STARTING and result.reason and result.message:
        progressed(session, job, result, now)
    elif result.observed == Observed.EXITED:
        exited(session, attempt, job, result, now)
    elif result.observed == Observed.LOST:
        lost(session, attempt, job, result, now)
    elif result.observed == Observed.ORPHANED:
        fenced(session, attempt, job, result, now)


def started(
    session: Session, attempt: AttemptModel, job: JobModel, at: float, notes: tuple[str, ...] = ()
) -> None:
    attempt.status, attempt.started_at = "running", at
    if job.status != JobStatus.STARTING.value:
        return
    job.status, job.started_at = JobStatus.RUNNING.value, at
    if attempt.stop_reason is None:  # a stop asked for before its start was seen says why
        job.reason, job.message = Reason.STARTED.value, f"running on {attempt.node}"
    message = f"attempt {attempt.number} started on {attempt.node}"
    job_service.record(session, job.id, at, Reason.STARTED, message)
    for note in notes:  # what the node could not hold the job to, or give it
        reason = Reason.NO_EGRESS if note.startswith(NO_EGRESS) else Reason.LIMITS_NOT_ENFORCED
        job_service.record(session, job.id, at, reason, note)


def progressed(session: Session, job: JobModel, result: PollResult, now: float) -> None:
    """What a starting attempt's runner does before the job runs (it builds the job's
    environment): the job's reason and message, and an event when that reason begins."""
    if job.status != JobStatus.STARTING.value or job.cancel_requested_at is not None:
        return
    try:
        reason, message = Reason(result.reason), result.message or ""
    except ValueError:  # a runner newer than this server: nothing it knows to say
        return
    if job.reason != reason.value:
        job_service.record(session, job.id, now, reason, message)
    job.reason, job.message = reason.value, message


def fenced(
    session: Session, attempt: AttemptModel, job: JobModel, result: PollResult, now: float
) -> None:
    """The runner is gone and the job's processes are not yet: its GPUs stay reserved."""
    attempt.status = "orphaned"
    message = result.message or f"the runner of attempt {attempt.number} is gone"
    job.reason, job.message = Reason.GPUS_FENCED.value, message
    job_service.record(session, job.id, now, Reason.GPUS_FENCED, message)


def exited(
    session: Session, attempt: AttemptModel, job: JobModel, result: PollResult, now: float
) -> None:
    at, code = result.ended_at or now, result.exit_code
    attempt.status, attempt.ended_at, attempt.exit_code = "exited", at, code
    if _preempted(attempt, job):
        requeue_preempted(session, attempt, job, now)
        return
    status, reason, message = outcome(job, code, attempt.stop_reason, result)
    job_service.finish(session, job, status, at, reason, message, exit_code=code)


def lost(
    session: Session, attempt: AttemptModel, job: JobModel, result: PollResult, now: float
) -> None:
    attempt.status, attempt.ended_at = "lost", now
    if _preempted(attempt, job):
        requeue_preempted(session, attempt, job, now)
        return
    if attempt.started_at is None and result.started_at is None:
        requeue(session, job, now, f"attempt {attempt.number} never started; requeued")
        return
    message = result.message or (
        f"the runner of attempt {attempt.number} vanished without recording an exit"
    )
    retries, lost_so_far = _retries(session, job)
    if lost_so_far <= retries and job.cancel_requested_at is None:
        said = f"{message}; requeued (retry {lost_so_far} of {retries})"
        requeue_after_loss(session, attempt, job, now, said)
        return
    job_service.finish(session, job, JobStatus.LOST, now, Reason.LOST, message)


def requeue_after_loss(
    session: Session, attempt: AttemptModel, job: JobModel, now: float, message: str
) -> None:
    """Back to the queue after a lost attempt, within the job's retries: the service it
    received counts, and it resumes from what it wrote to its checkpoint directory."""
    ran = max(0.0, (attempt.ended_at or now) - (attempt.started_at or now))
    job.attained = (job.attained or 0.0) + job.gpus * ran
    job.queued_at = now
    job.status, job.node, job.placement = JobStatus.PENDING.value, None, None
    job.reason, job.message = Reason.REQUEUED.value, message
    job_service.record(session, job.id, now, Reason.REQUEUED, message)


def _retries(session: Session, job: JobModel) -> tuple[int, int]:
    """The job's retries, and how many of its attempts were lost (this one included)."""
    retries = int((job.spec or {}).get("retries") or 0)
    lost_count = session.scalar(
        select(func.count())
        .select_from(AttemptModel)
        .where(AttemptModel.job_id == job.id, AttemptModel.status == "lost")
    )
    return retries, int(lost_count or 0)


def requeue(session: Session, job: JobModel, now: float, message: str) -> None:
    """Back to the queue (the attempt never ran), unless a cancel was asked for meanwhile."""
    if job.cancel_requested_at is not None:
        job_service.finish(session, job, JobStatus.CANCELLED, now, Reason.CANCELLED, message)
        return
    job.status, job.node, job.placement = JobStatus.PENDING.value, None, None
    job.reason, job.message = Reason.REQUEUED.value, message
    job_service.record(session, job.id, now, Reason.REQUEUED, message)


def requeue_preempted(session: Session, attempt: AttemptModel, job: JobModel, now: float) -> None:
    """Back to the queue with its history: the service it received counts as attained."""
    ran = max(0.0, (attempt.ended_at or now) - (attempt.started_at or now))
    job.attained = (job.attained or 0.0) + job.gpus * ran
    job.preemptions = (job.preemptions or 0) + 1
    job.queued_at = now
    job.status, job.node, job.placement = JobStatus.PENDING.value, None, None
    job.reason, job.message = Reason.REQUEUED.value, stops.REQUEUED_MESSAGE
    job_service.record(session, job.id, now, Reason.REQUEUED, stops.REQUEUED_MESSAGE)


STOPPED_FOR = {
    r.value: r for r in (Reason.GPU_MEMORY_EXCEEDED, Reason.MEMORY_EXCEEDED, Reason.PIDS_EXCEEDED)
}


def outcome(
    job: JobModel,
    code: int | None,
    stop_reason: str | None = None,
    result: PollResult | None = None,
) -> tuple[JobStatus, Reason, str]:
    if job.cancel_requested_at is not None:
        return (
            JobStatus.CANCELLED,
            Reason.CANCELLED,
            f"cancelled; the process ended with code {code}",
        )
    if stop_reason == StopReason.MAX_RUNTIME:
        return JobStatus.FAILED, Reason.MAX_RUNTIME_EXCEEDED, stops.ended_message(job, code)
    if stop_reason == StopReason.STORAGE_QUOTA:
        message = stops.storage_ended_message(job, code)
        return JobStatus.FAILED, Reason.STORAGE_QUOTA_EXCEEDED, message
    if stop_reason == StopReason.EARLY_STOPPED:
        return JobStatus.CANCELLED, Reason.EARLY_STOPPED, stops.early_message(job, code)
    if result is not None and result.reason in STOPPED_FOR:  # over what it asked for
        return JobStatus.FAILED, STOPPED_FOR[result.reason], result.message or result.reason
    if code == 0:
        return JobStatus.SUCCEEDED, Reason.EXITED, "exited with code 0"
    said = f": {result.message}" if result is not None and result.message else ""
    return JobStatus.FAILED, Reason.EXITED, f"exited with code {code}{said}"


def _preempted(attempt: AttemptModel, job: JobModel) -> bool:
    return attempt.stop_reason == StopReason.PREEMPTED and job.cancel_requested_at is None
