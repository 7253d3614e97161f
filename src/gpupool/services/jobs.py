"""Jobs: submit, list, show, cancel, events. The control loop does the rest."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobSpec, JobStatus, Reason
from gpupool.errors import Conflict, InvalidRequest, NotFound, Unsatisfiable
from gpupool.scheduler import infeasible_reason
from gpupool.scheduler.types import NodeCapacity
from gpupool.services import users
from gpupool.services.access import Principal
from gpupool.store.models import AttemptModel, EventModel, JobModel, TeamModel

MAX_LIST = 1000


@dataclass(frozen=True)
class JobFilter:
    status: Sequence[JobStatus] = ()
    team: str | None = None
    user: str | None = None
    limit: int = 100


def submit(
    session: Session,
    principal: Principal,
    spec: JobSpec,
    nodes: Sequence[NodeCapacity],
    now: float,
) -> JobModel:
    """Queue a job, or refuse it at once if no node could ever run it."""
    principal.require_member()
    team = _team_for(session, principal, spec.team)
    problem = infeasible_reason(spec.resources, nodes)
    if problem:
        raise Unsatisfiable(f"no node can run this job: {problem}. Ask for less.")
    job = JobModel(
        name=spec.name,
        user_id=principal.user_id,
        team_id=team.id,
        spec=spec.model_dump(mode="json"),
        status=JobStatus.PENDING.value,
        priority=spec.priority,
        gpus=spec.resources.gpu_count,
        submitted_at=now,
        reason=Reason.QUEUED.value,
        message="waiting for the scheduler",
        attempts=0,
    )
    job.team = team
    session.add(job)
    session.flush()
    record(session, job.id, now, Reason.SUBMITTED, f"submitted by {principal.name} to {team.name}")
    return job


def list_jobs(session: Session, principal: Principal, where: JobFilter) -> list[JobModel]:
    query = select(JobModel).order_by(JobModel.id.desc()).limit(min(where.limit, MAX_LIST))
    if not principal.is_admin:
        query = query.where(JobModel.team_id.in_(principal.team_ids or {-1}))
    if where.status:
        query = query.where(JobModel.status.in_([s.value for s in where.status]))
    if where.team:
        query = query.join(TeamModel).where(TeamModel.name == where.team)
    if where.user:
        query = query.where(JobModel.user.has(name=where.user))
    return list(session.scalars(query))


def get_job(session: Session, principal: Principal, job_id: int) -> JobModel:
    """The job, or NotFound when it does not exist or belongs to a team the caller cannot see."""
    job = session.get(JobModel, job_id)
    if job is None or not principal.can_see_team(job.team_id):
        raise NotFound(f"no job {job_id}: list your jobs with 'gpupool ls'")
    return job


def cancel(session: Session, principal: Principal, job_id: int, now: float) -> JobModel:
    """Cancel a pending job at once; ask the control loop to stop a running one.

    Both steps are conditional updates, so a cancel racing with a dispatch either wins (the
    job never starts) or leaves the flag that makes the control loop stop the attempt.
    """
    job = get_job(session, principal, job_id)
    if not principal.can_act_on_team(job.team_id):
        raise NotFound(f"no job {job_id} that you can cancel")
    if JobStatus(job.status).is_final:
        if job.status == JobStatus.CANCELLED:
            return job
        raise Conflict(f"job {job_id} already ended ({job.status}); nothing to cancel")
    flagged = session.execute(
        update(JobModel)
        .where(JobModel.id == job_id, JobModel.cancel_requested_at.is_(None))
        .values(cancel_requested_at=now)
    )
    if flagged.rowcount:
        record(
            session, job_id, now, Reason.CANCEL_REQUESTED, f"cancel requested by {principal.name}"
        )
    message = "cancelled before it started"
    ended = session.execute(
        update(JobModel)
        .where(JobModel.id == job_id, JobModel.status == JobStatus.PENDING.value)
        .values(
            status=JobStatus.CANCELLED.value,
            ended_at=now,
            reason=Reason.CANCELLED.value,
            message=message,
        )
    )
    if ended.rowcount:
        record(session, job_id, now, Reason.CANCELLED, message)
    session.refresh(job)
    return job


def events(session: Session, job_id: int, after_id: int = 0) -> list[EventModel]:
    query = (
        select(EventModel)
        .where(EventModel.job_id == job_id, EventModel.id > after_id)
        .order_by(EventModel.id)
    )
    return list(session.scalars(query))


def attempts(session: Session, job_id: int) -> list[AttemptModel]:
    query = select(AttemptModel).where(AttemptModel.job_id == job_id).order_by(AttemptModel.number)
    return list(session.scalars(query))


def record(session: Session, job_id: int | None, now: float, reason: Reason, message: str) -> None:
    session.add(EventModel(job_id=job_id, at=now, reason=reason.value, message=message))


def finish(
    session: Session,
    job: JobModel,
    status: JobStatus,
    now: float,
    reason: Reason,
    message: str,
    exit_code: int | None = None,
) -> None:
    job.status, job.ended_at, job.exit_code = status.value, now, exit_code
    job.reason, job.message = reason.value, message
    record(session, job.id, now, reason, message)


def _team_for(session: Session, principal: Principal, name: str | None) -> TeamModel:
    if name:
        team = users.get_team(session, name)
        if not principal.can_act_on_team(team.id):
            raise users.UnknownTeam(
                f"you are not a member of team '{name}': submit to one of your teams"
            )
        return team
    if len(principal.team_ids) == 1:
        team = session.get(TeamModel, next(iter(principal.team_ids)))
        if team is not None:
            return team
    mine = [t for t in users.list_teams(session) if t.id in principal.team_ids]
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise InvalidRequest("you belong to no team: ask an admin to add you to one")
    names = ", ".join(t.name for t in mine)
    raise InvalidRequest(f"you belong to several teams ({names}): choose one with --team")
