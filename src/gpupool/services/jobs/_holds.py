"""Held jobs (Slurm's hold and release): pending, and never started until released.

A job is held at submission (``JobSpec.hold``, ``gpupool run --hold``) or while it is pending
(``gpupool hold``). Held, its ``held`` column is set and its reason is ``Held``, with a
message naming the command that releases it; the scheduler's snapshot leaves it out (one more
predicate on the query it runs anyway), a launch never claims it, neither the scheduler nor
the dependencies' pass write another reason over it. Released, it goes back to the queue (or
to waiting for the jobs it depends on, which it may have done meanwhile). Each is an event:
``Held``, ``Released``. The steps here take a job its caller found and may act on.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import String, cast, insert, literal, update
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobKind, JobStatus, Reason
from gpupool.errors import Conflict
from gpupool.store.models import EventModel, JobModel

AT_SUBMISSION = "held at submission"


def held_message(job_id: int, how: str) -> str:
    """'held at submission: gpupool release 12': the job's status line while held."""
    return f"{how}: gpupool release {job_id}"


def hold_at_submission(session: Session, job_ids: Sequence[int], now: float) -> None:
    """Jobs just submitted held (their ``held`` set with their other columns): reason Held,
    a message naming each one's release (one statement for an array's tasks too), and an
    event each (after the events the session holds: their Submitted)."""
    session.flush()
    session.execute(
        update(JobModel)
        .where(JobModel.id.in_(job_ids))
        .values(
            reason=Reason.HELD.value,
            message=literal(f"{AT_SUBMISSION}: gpupool release ") + cast(JobModel.id, String),
        )
        .execution_options(synchronize_session=False)
    )
    event = {"at": now, "reason": Reason.HELD.value, "message": AT_SUBMISSION}
    session.execute(insert(EventModel), [{"job_id": job_id, **event} for job_id in job_ids])


def hold(session: Session, job: JobModel, by: str, now: float) -> None:
    """Hold a pending job (a held one stays as it is); Conflict for any other. A
    conditional update: a launch that claimed it meanwhile wins, and the hold is refused."""
    if job.held:
        return
    _require_holdable(job)
    how = f"held by {by}"
    done = session.execute(
        update(JobModel)
        .where(
            JobModel.id == job.id,
            JobModel.status == JobStatus.PENDING.value,
            JobModel.cancel_requested_at.is_(None),
        )
        .values(held=True, reason=Reason.HELD.value, message=held_message(job.id, how))
    )
    if not done.rowcount:
        session.refresh(job)
        _require_holdable(job)  # it started or was cancelled since it was read
    _event(session, job.id, now, Reason.HELD, how)


def release(session: Session, job: JobModel, by: str, now: float) -> None:
    """Release a held job back to the queue, or to waiting for the jobs it depends on (a
    job that is not held stays as it is); Conflict for a job that has left the queue."""
    if job.status != JobStatus.PENDING.value:
        raise Conflict(f"job {job.id} is {job.status}: there is nothing to release")
    if not job.held:
        return
    if job.waiting:  # the dependencies' pass names the job it waits for at its next turn
        reason, message = Reason.DEPENDENCY, f"released by {by}: waits for its dependencies"
    else:
        reason, message = Reason.QUEUED, f"released by {by}: waiting for the scheduler"
    done = session.execute(
        update(JobModel)
        .where(
            JobModel.id == job.id,
            JobModel.held.is_(True),
            JobModel.status == JobStatus.PENDING.value,
        )
        .values(held=False, reason=reason.value, message=message)
    )
    if done.rowcount:
        _event(session, job.id, now, Reason.RELEASED, f"released by {by}")


def _require_holdable(job: JobModel) -> None:
    if job.kind not in (JobKind.JOB.value, None):
        raise Conflict(
            f"job {job.id} runs a {job.kind}: hold batch jobs only (stop a notebook or scale "
            "a deployment instead)"
        )
    if job.status != JobStatus.PENDING.value or job.cancel_requested_at is not None:
        state = "being cancelled" if job.cancel_requested_at is not None else job.status
        raise Conflict(
            f"job {job.id} is {state}: only a pending job can be held (stop a running one "
            f"with gpupool cancel {job.id})"
        )


def _event(session: Session, job_id: int, now: float, reason: Reason, message: str) -> None:
    session.add(EventModel(job_id=job_id, at=now, reason=reason.value, message=message))
