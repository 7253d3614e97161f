"""Jobs: submit, list, show, cancel, events. The control loop does the rest.

The functions that take a port (``core.Reads``, ``Submits``...) are what the API calls: each
opens its own transaction, returns read models, and wakes the control loop when there is work
for it. The functions that take a ``Session`` are the steps they (and other services) are
made of.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select, update
from sqlalchemy.orm import Session

import gpupool.services.jobs._code as code
import gpupool.services.jobs._dependencies as dependencies
import gpupool.services.jobs._holds as holds
import gpupool.services.jobs._image_refs as image_refs
import gpupool.services.jobs._model_files as model_files
from gpupool.domain.jobs import MAX_PRIORITY, JobKind, JobSpec, JobStatus, Reason, Role
from gpupool.domain.views import (
    EventView,
    JobDetailView,
    JobStateView,
    JobView,
    SubmitOptionsView,
)
from gpupool.errors import (
    Conflict,
    HostNetworkNotAllowed,
    ImageNeedsSandbox,
    InvalidRequest,
    NotFound,
    PriorityNotAllowed,
    Unsatisfiable,
    WorkdirNotAllowed,
)
from gpupool.executors.isolation import protected_paths, within, workdir_conflict
from gpupool.scheduler import infeasible_reason
from gpupool.scheduler.types import NodeCapacity
from gpupool.services import datasets, environments, identity
from gpupool.services.core import Principal, Reads, Submits, Tells
from gpupool.services.jobs._views import attempt_view, event_view, job_view
from gpupool.settings import Settings
from gpupool.store.models import AttemptModel, EventModel, JobModel, TeamModel

MAX_LIST = 1000


@dataclass(frozen=True)
class JobLimits:
    """What a submit may ask for beyond the spec's own bounds (from the server's settings)."""

    member_max_priority: int = 100
    max_grace_seconds: float = 3600.0
    # no working directory may lie in these, nor above them when no sandbox hides them
    protected: tuple[str, ...] = ()
    sandboxed: bool = True
    allow_host_network: bool = False
    pids_max: int = 4096  # the most tasks a job may ask to hold (GPUPOOL_JOB_PIDS_MAX)

    @classmethod
    def of(cls, settings: Settings) -> JobLimits:
        protected = tuple(protected_paths(settings))
        return cls(
            settings.member_max_priority,
            settings.max_grace_seconds,
            protected,
            settings.isolated,
            settings.allow_host_network,
            settings.job_pids_max,
        )


@dataclass(frozen=True)
class JobFilter:
    """``array_id``: only the tasks of this job array, by index; ``array_tasks``: False leaves
    out every array's tasks (the arrays are listed as one, ``services.jobs._arrays``)."""

    status: Sequence[JobStatus] = ()
    team: str | None = None
    user: str | None = None
    limit: int = 100
    array_id: int | None = None
    array_tasks: bool = True


# -- what the API calls ------------------------------------------------------------------------


def submit_job(
    ctx: Submits, who: Principal, spec: JobSpec, *, kind: JobKind = JobKind.JOB
) -> JobView:
    """Queue a job (see ``submit``) and wake the control loop to place it. ``kind``: what
    the job is (notebooks and deployments submit their workloads' jobs through here)."""
    capacities, now, limits = ctx.loop.recent_nodes(), ctx.clock.now(), JobLimits.of(ctx.settings)
    with ctx.db.session() as session:
        job = submit(session, who, spec, capacities, now, limits, kind=kind)
        shown = job_view(job, now, user=who.name)
    ctx.loop.wake()
    return shown


def list_jobs(ctx: Tells, who: Principal, where: JobFilter) -> list[JobView]:
    """The jobs ``who`` can see that match ``where``, newest first (an array's by index)."""
    reasons = ctx.loop.pending_reasons
    with ctx.db.reader() as session:
        found, now = select_jobs(session, who, where), ctx.clock.now()
        return [job_view(job, now, reasons.get(job.id)) for job in found]


def show_job(ctx: Tells, who: Principal, job_id: int) -> JobDetailView:
    """The job with its events and attempts; NotFound if ``who`` cannot see it."""
    with ctx.db.reader() as session:
        job = get_job(session, who, job_id)
        shown = job_view(job, ctx.clock.now(), ctx.loop.pending_reasons.get(job_id))
        return JobDetailView(
            **dict(shown),
            events=[event_view(e) for e in events(session, job_id)],
            attempts_detail=[attempt_view(a) for a in attempts(session, job_id)],
            code_snapshot=code.snapshot(session, shown.spec.code),
        )


def cancel_job(ctx: Tells, who: Principal, job_id: int) -> JobView:
    """Cancel the job (see ``cancel``) and wake the control loop to stop it."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        shown = job_view(cancel(session, who, job_id, now), now)
    ctx.loop.wake()
    return shown


def hold_job(ctx: Tells, who: Principal, job_id: int) -> JobView:
    """Hold a pending job (``holds.hold``): it stays pending, never started until released."""
    return _hold_or_release(ctx, who, job_id, holds.hold)


def release_job(ctx: Tells, who: Principal, job_id: int) -> JobView:
    """Release a held job (``holds.release``) and wake the control loop to place it."""
    shown = _hold_or_release(ctx, who, job_id, holds.release)
    ctx.loop.wake()
    return shown


def _hold_or_release(
    ctx: Tells, who: Principal, job_id: int, step: Callable[[Session, JobModel, str, float], None]
) -> JobView:
    """As a cancel: another team's job is not found, a viewer may not act."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        job = get_job(session, who, job_id)
        who.require_member()
        step(session, job, who.name, now)
        session.refresh(job)
        return job_view(job, now)


def job_events(ctx: Reads, who: Principal, job_id: int, after_id: int = 0) -> list[EventView]:
    """The job's events after ``after_id``, oldest first."""
    with ctx.db.reader() as session:
        get_job(session, who, job_id)
        return [event_view(e) for e in events(session, job_id, after_id)]


def job_state(ctx: Reads, who: Principal, job_id: int) -> JobStateView:
    """Where the job stands now: its status, reason, message and exit code."""
    with ctx.db.reader() as session:
        job = get_job(session, who, job_id)
        return JobStateView(
            status=JobStatus(job.status),
            reason=job.reason,
            message=job.message,
            exit_code=job.exit_code,
        )


def submit_options(ctx: Submits, who: Principal) -> SubmitOptionsView:
    """What a submit form offers ``who``: its teams, the pool's GPU models, the priorities its
    role may use (a submit beyond them is refused with priority_not_allowed), grace periods."""
    nodes, settings = ctx.loop.recent_nodes(), ctx.settings
    with ctx.db.reader() as session:
        teams = [(t.id, t.name) for t in identity.team_rows(session)]
    return SubmitOptionsView(
        teams=[name for team_id, name in teams if who.can_act_on_team(team_id)],
        own_teams=[name for team_id, name in teams if team_id in who.team_ids],
        gpu_models=sorted({g.model for n in nodes if n.schedulable for g in n.gpus}),
        min_priority=-MAX_PRIORITY,
        max_priority=MAX_PRIORITY if who.is_admin else settings.member_max_priority,
        admin_max_priority=MAX_PRIORITY,
        default_grace_seconds=settings.stop_grace_seconds,
        max_grace_seconds=settings.max_grace_seconds,
        viewer=who.role == Role.VIEWER,
    )


# -- the steps, in a caller's transaction ------------------------------------------------------


def submit(
    session: Session,
    principal: Principal,
    spec: JobSpec,
    nodes: Sequence[NodeCapacity],
    now: float,
    limits: JobLimits = JobLimits(),
    *,
    kind: JobKind = JobKind.JOB,
    platform_env: dict[str, str] | None = None,
) -> JobModel:
    """Queue a job of ``kind``, or refuse it at once if no node could ever run it;
    ``platform_env``: variables gpupool sets for it, never part of its spec (a trial's)."""
    team = admit(session, principal, spec, nodes, limits)
    resolved = dependencies.resolve(session, team.id, spec.depends_on)
    job = new_job(principal, team, dependencies.recorded(spec, resolved), now, kind)
    job.platform_env = platform_env
    for column, value in dependencies.waiting_values(resolved).items():
        setattr(job, column, value)
    session.add(job)
    session.flush()
    dependencies.attach(session, [job.id], resolved)
    datasets.attach_uses(session, [job.id], team.id, spec.datasets)
    record(session, job.id, now, Reason.SUBMITTED, submitted_message(principal, team))
    if spec.hold:
        holds.hold_at_submission(session, [job.id], now)
        session.refresh(job)
    return job


def admit(
    session: Session,
    principal: Principal,
    spec: JobSpec,
    nodes: Sequence[NodeCapacity],
    limits: JobLimits,
) -> TeamModel:
    """The checks every submit passes (role, priority, grace, workdir, the team's storage,
    code, size); the team to charge."""
    principal.require_member()
    check_limits(principal, spec, limits)
    check_workdir(spec.workdir, limits.protected, limits.sandboxed)
    team = identity.acting_team(session, principal, spec.team, "submit to")
    identity.refuse_over_storage(team)  # it would be stopped at the next scan, files written
    if spec.code is not None:
        code.require_usable(session, principal, spec.code, team.id, team.name)
    if spec.model is not None:
        model_files.require_usable(session, spec.model, team.id, team.name)
    if spec.environment is not None:  # the version it runs, from now on
        spec.environment = environments.recorded_ref(
            session, principal, spec.environment, team.id, team.name
        )
    if spec.image is not None or spec.image_digest is not None:  # what it runs in, by digest
        spec.image_digest = _image_digest(session, spec, team, limits)
    if spec.datasets:  # the versions it reads, from now on
        spec.datasets = datasets.resolve_uses(session, spec.datasets, team.id, team.name)
    if spec.volumes:  # by id: a volume deleted and made again is another one
        spec.volumes = datasets.resolve_volumes(session, spec.volumes, team.id, team.name)
    check_feasible(spec, nodes)
    return team


def _image_digest(session: Session, spec: JobSpec, team: TeamModel, limits: JobLimits) -> str:
    if spec.image is None:
        raise InvalidRequest(
            "image_digest is set by the server when a job is submitted: name the image in "
            "image (gpupool run --image NAME)",
            fields=[{"field": "image_digest", "message": "give image instead"}],
        )
    if not limits.sandboxed:
        raise ImageNeedsSandbox()
    return image_refs.resolve(session, spec.image, team.id, team.name)


def new_job(
    principal: Principal, team: TeamModel, spec: JobSpec, now: float, kind: JobKind = JobKind.JOB
) -> JobModel:
    job = JobModel(**job_values(principal, team, spec.model_dump(mode="json"), now), kind=kind)
    job.team = team
    return job


def job_values(
    principal: Principal, team: TeamModel, spec: dict[str, Any], now: float
) -> dict[str, Any]:
    """The columns of a new pending job of ``spec`` (its JSON): an array's tasks are
    inserted in bulk from these."""
    return {
        "name": spec.get("name"),
        "user_id": principal.user_id,
        "team_id": team.id,
        "spec": spec,
        "status": JobStatus.PENDING.value,
        "priority": spec["priority"],
        # all the job's GPUs: a job over several nodes holds its per-node share on each
        "gpus": (spec["resources"].get("gpus") or 0.0) * (spec.get("nodes") or 1),
        "submitted_at": now,
        "reason": Reason.QUEUED.value,
        "message": "waiting for the scheduler",
        "attempts": 0,
        "preemptible": spec["preemptible"],
        "attained": 0.0,
        "preemptions": 0,
        "held": bool(spec.get("hold")),  # its reason: holds.hold_at_submission
    }


def submitted_message(principal: Principal, team: TeamModel) -> str:
    return f"submitted by {principal.name} to {team.name}"


def check_limits(principal: Principal, spec: JobSpec, limits: JobLimits) -> None:
    """Refuse a priority above the caller's role, a grace period above the server's, or a
    limit of tasks above the node's."""
    highest = MAX_PRIORITY if principal.is_admin else limits.member_max_priority
    if not -MAX_PRIORITY <= spec.priority <= highest:
        raise PriorityNotAllowed(
            f"priority {spec.priority} is not allowed for a {principal.role.value}: use "
            f"{-MAX_PRIORITY}..{highest}",
            allowed={"min": -MAX_PRIORITY, "max": highest},
        )
    if spec.network == "host" and not (principal.is_admin or limits.allow_host_network):
        raise HostNetworkNotAllowed()
    grace = spec.grace_period_seconds
    if grace is not None and grace > limits.max_grace_seconds:
        raise InvalidRequest(
            f"grace_period_seconds: at most {limits.max_grace_seconds:g} s on this server",
            fields=[{"field": "grace_period_seconds", "message": "too long"}],
        )
    check_pids(spec.resources.pids, limits.pids_max)


def check_pids(pids: int | None, pids_max: int) -> None:
    """Refuse a job's limit of tasks above the one an admin set for every job."""
    if pids is not None and pids > pids_max:
        raise InvalidRequest(
            f"resources.pids: at most {pids_max} tasks (processes and threads) on this server "
            "(GPUPOOL_JOB_PIDS_MAX, an admin's setting): ask for fewer, or leave --pids out "
            "to get that limit",
            fields=[{"field": "resources.pids", "message": f"at most {pids_max}"}],
        )


def check_workdir(workdir: str | None, protected: Sequence[str], sandboxed: bool = True) -> None:
    """A working directory is absolute, and never in gpupool's own files (its data
    directory: the database, every job's files), nor above them unless a sandbox hides them
    from the job. Whether the job's Unix account may read it is checked on the node, as that
    account, when the job starts."""
    if workdir is None:
        return
    if not os.path.isabs(workdir):
        raise WorkdirNotAllowed(
            f"workdir '{workdir}' is not an absolute path: give the full path (the CLI sends "
            "the directory it runs in)",
            fields=[{"field": "workdir", "message": "not an absolute path"}],
        )
    secret = workdir_conflict(workdir, list(protected), sandboxed)
    if secret is not None:
        where = "in" if within(os.path.realpath(workdir), secret) else "above"
        raise WorkdirNotAllowed(
            f"workdir '{workdir}' is {where} gpupool's own files ({secret}); choose a "
            "directory of your own",
            fields=[{"field": "workdir", "message": "gpupool's own files"}],
        )


def check_feasible(spec: JobSpec, nodes: Sequence[NodeCapacity]) -> None:
    """Refuse a job no node could ever run: too big, or no GPU of the types it names."""
    types = tuple(spec.gpu_types)
    problem = infeasible_reason(spec.resources, nodes, gpu_types=types)
    if not problem:
        return
    if types and infeasible_reason(spec.resources, nodes) is None:
        raise Unsatisfiable(f"no node can run this job: {problem}. Ask for a GPU type it has.")
    raise Unsatisfiable(f"no node can run this job: {problem}. Ask for less.")


def select_jobs(session: Session, principal: Principal, where: JobFilter) -> list[JobModel]:
    order = JobModel.array_index if where.array_id is not None else JobModel.id.desc()
    query = select(JobModel).order_by(order).limit(min(where.limit, MAX_LIST))
    if where.array_id is not None:
        query = query.where(JobModel.array_id == where.array_id)
    if not where.array_tasks:
        query = query.where(JobModel.array_id.is_(None))
    return list(session.scalars(visible_matching(query, principal, where)))


def visible_matching(query: Select[Any], principal: Principal, where: JobFilter) -> Select[Any]:
    """``query`` over jobs narrowed to the teams ``principal`` sees and to ``where``'s status,
    team and user (jobs and job arrays are listed through the same filter)."""
    if not principal.is_admin:
        query = query.where(JobModel.team_id.in_(principal.team_ids or {-1}))
    if where.status:
        query = query.where(JobModel.status.in_([s.value for s in where.status]))
    if where.team:
        query = query.join(TeamModel).where(TeamModel.name == where.team)
    if where.user:
        query = query.where(JobModel.user.has(name=where.user))
    return query


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
    principal.require_member()  # a viewer sees the job (else NotFound above) but may not act
    if JobStatus(job.status).is_final:
        if job.status == JobStatus.CANCELLED:
            return job
        raise Conflict(f"job {job_id} already ended ({job.status}); nothing to cancel")
    if flag_cancel(session, job_id, now):
        record(
            session, job_id, now, Reason.CANCEL_REQUESTED, f"cancel requested by {principal.name}"
        )
    cancel_pending(session, job_id, now, "cancelled before it started")
    session.refresh(job)
    return job


def flag_cancel(session: Session, job_id: int, now: float) -> bool:
    """Ask the control loop to stop the job (it stops a running attempt); True when this
    call set the flag, False when it was set already."""
    flagged = session.execute(
        update(JobModel)
        .where(JobModel.id == job_id, JobModel.cancel_requested_at.is_(None))
        .values(cancel_requested_at=now)
    )
    return bool(flagged.rowcount)


def cancel_pending(
    session: Session,
    job_id: int,
    now: float,
    message: str,
    reason: Reason = Reason.CANCELLED,
) -> bool:
    """Cancel the job at once if it is still pending, with ``message`` (and ``reason``: a
    trial stopped early is cancelled as EarlyStopped); True when it was. A conditional update
    after ``flag_cancel``: a cancel racing with a dispatch either wins (the job never starts)
    or leaves the flag that makes the control loop stop the attempt."""
    ended = session.execute(
        update(JobModel)
        .where(JobModel.id == job_id, JobModel.status == JobStatus.PENDING.value)
        .values(
            status=JobStatus.CANCELLED.value,
            ended_at=now,
            reason=reason.value,
            message=message,
        )
    )
    if ended.rowcount:
        record(session, job_id, now, reason, message)
    return bool(ended.rowcount)


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
