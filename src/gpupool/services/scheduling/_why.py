"""Why a job waits (or what it does instead): the answer of ``gpupool why`` and the job page.

A pending job gets the scheduler's latest word on it (reason code, message, position in its
team's queue, what blocks it) and an estimated start time from ``_eta``. A job that
started or ended gets a plain sentence saying so: there is nothing to wait for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import select
from sqlalchemy.orm import Session

import gpupool.services.scheduling._eta as eta
from gpupool.domain import locality
from gpupool.domain.experiments import (
    ExperimentSpec,
    TrialStandingView,
    TrialState,
    verdict_text,
)
from gpupool.domain.jobs import JobKind, JobStatus, Reason
from gpupool.domain.views import EstimateView, QueuedJobView, QueueTeamView, QueueView, WhyView
from gpupool.domain.waiting import PendingReason
from gpupool.services.core import Estimate, Forecast, Principal, Tells
from gpupool.services.jobs import get_job
from gpupool.services.scheduling._snapshots import placement_tasks
from gpupool.store.models import ExperimentModel, JobDependencyModel, JobModel, TrialModel

MAX_QUEUE = 500  # pending jobs listed at most (the first in queue order)

NOT_LOOKED_AT = "the scheduler has not looked at it yet; it does within a second or two"


# -- what the API calls ------------------------------------------------------------------------


def why_waits(ctx: Tells, who: Principal, job_id: int) -> WhyView:
    """Why the job waits (or what it does instead); NotFound if ``who`` cannot see it."""
    with ctx.db.reader() as session:
        pending = get_job(session, who, job_id).status == JobStatus.PENDING.value
    # the forecast is the only slow part, if any: outside any transaction, pending jobs only
    forecast = ctx.loop.forecast(ctx.clock.now(), job_id) if pending else None
    estimate = forecast.estimate(job_id) if forecast else None
    assumes = eta.assumptions(forecast.bounds) if forecast else ()
    with ctx.db.reader() as session:
        job = get_job(session, who, job_id)
        why = explain(job, ctx.loop.pending_reasons.get(job_id), estimate, assumes)
        if job.waiting and job.reason == Reason.ENV_BUILDING.value:
            why = replace(why, summary=why.summary + _build_progress(session, job.id))
        standing = trial_standing(session, job) if job.kind == JobKind.TRIAL.value else None
        return why_view(why).model_copy(update={"trial": standing})


def show_queue(ctx: Tells, who: Principal) -> QueueView:
    """The pending jobs of the teams ``who`` can see, by team, in queue order, with
    estimated starts."""
    reasons = ctx.loop.pending_reasons
    forecast = ctx.loop.forecast(ctx.clock.now())
    assumes = eta.assumptions(forecast.bounds)
    with ctx.db.reader() as session:
        teams, waiting = queue(session, who, reasons, forecast, assumes)
        shown = [
            QueueTeamView(team=t.team, jobs=[queued_view(job, w) for job, w in t.jobs])
            for t in teams
        ]
    return QueueView(
        computed_at=forecast.computed_at, assumes=assumes, waiting=waiting, teams=shown
    )


# -- the answers -------------------------------------------------------------------------------


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
    if job.held:  # not given to the scheduler: no position, no estimate
        summary = f"it is held and starts only once released (gpupool release {job.id})"
        unknown = "it is held: it is queued only once released"
        message = job.message or ""
        return Why(
            job.id, JobStatus.PENDING, summary, Reason.HELD.value, message, eta_unknown=unknown
        )
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
    if job.waiting:  # the scheduler is not given it until the jobs it depends on end
        summary = f"it {message}" if message.startswith("waits") else summary
        unknown = "it is queued only once the jobs it depends on have ended"
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
        if job.reason in (Reason.ENV_BUILDING, Reason.DATASET_FETCHING) and job.message:
            return f"it is starting{node}, {job.message}{_placed(job, ' (placed there: ')}"
        return f"it is starting{node}: it does not wait any more{_placed(job, '; ')}"
    if status is JobStatus.RUNNING:
        return f"it is running{node}: it does not wait any more{_placed(job, '; ')}"
    if status is JobStatus.SUCCEEDED:
        return "it has ended: it succeeded"
    if status is JobStatus.FAILED:
        code = f" (exit code {job.exit_code})" if job.exit_code is not None else ""
        return f"it has ended: it failed{code}"
    if status is JobStatus.CANCELLED and job.reason == Reason.DEPENDENCY_NEVER_SATISFIED:
        return f"it has ended: it was cancelled because {job.message}"
    if status is JobStatus.CANCELLED:
        return "it has ended: it was cancelled"
    return f"it has ended: {status.value}"


def _build_progress(session: Session, job_id: int) -> str:
    """How far the build a job waits for has come (its build job's word while it builds)."""
    said = session.scalar(
        select(JobModel.message)
        .join(JobDependencyModel, JobDependencyModel.depends_on_id == JobModel.id)
        .where(
            JobDependencyModel.job_id == job_id,
            JobModel.kind == JobKind.ENV_BUILD.value,
            JobModel.reason == Reason.ENV_BUILDING.value,
            JobModel.status == JobStatus.STARTING.value,
        )
        .limit(1)
    )
    return f" ({said})" if said else ""


def trial_standing(session: Session, job: JobModel) -> TrialStandingView | None:
    """A trial's job: where the trial stands in its experiment, rung by rung."""
    found = session.execute(
        select(TrialModel, ExperimentModel.name, ExperimentModel.spec)
        .join(ExperimentModel, ExperimentModel.id == TrialModel.experiment_id)
        .where(TrialModel.job_id == job.id)
    ).first()
    if found is None:
        return None
    trial, name, spec = found
    stopping = ExperimentSpec.model_validate(spec).stopping
    rungs = stopping.rungs()
    lines = [
        verdict_text(int(rung), rungs[int(rung)], stopping.time_metric, *map(int, said[1:]))
        for rung, said in sorted((trial.rungs or {}).items(), key=lambda kv: int(kv[0]))
        if int(rung) < len(rungs)
    ]
    return TrialStandingView(
        experiment=name,
        number=trial.number,
        state=TrialState(trial.state),
        rungs=lines,
        message=trial.message,
    )


def _placed(job: JobModel, lead: str) -> str:
    """What the nodes of a started job held of what it fetches when it was placed (its
    placement's ``held``), led by ``lead``; empty for a job that fetches nothing."""
    notes = [
        note
        for task in placement_tasks(job.placement or {})
        if task.get("node")
        and (note := locality.held_note(job.spec, task["node"], task.get("held") or ()))
    ]
    if not notes:
        return ""
    return lead + "; ".join(notes) + (")" if lead.endswith("(placed there: ") else "")


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
    reason = None if job.held else reasons.get(job.id)  # held: after the queue
    position = reason.position if reason is not None else 1 << 30
    return (position, -job.priority, job.queued_at or job.submitted_at, job.id)


def why_view(why: Why) -> WhyView:
    """The answer as the API shows it."""
    estimate = None
    if why.estimate is not None:
        duration = why.estimate.duration
        estimate = EstimateView(
            computed_at=why.estimate.computed_at,
            duration_seconds=duration.seconds if duration else None,
            duration_basis=duration.basis if duration else None,
            duration_text=duration.text if duration else None,
            assumes=list(why.assumptions),
        )
    return WhyView(
        job_id=why.job_id,
        status=why.status,
        summary=why.summary,
        code=why.code,
        message=why.message,
        position=why.position,
        blockers=list(why.blockers),
        eta=why.eta,
        eta_unknown=why.eta_unknown,
        estimate=estimate,
    )


def queued_view(job: JobModel, answer: Why) -> QueuedJobView:
    """A waiting job in the queue, with its answer."""
    resources = job.spec.get("resources") or {}
    return QueuedJobView(
        id=job.id,
        name=job.name,
        user=job.user.name,
        priority=job.priority,
        gpus=resources.get("gpus"),
        gpu_memory_bytes=resources.get("gpu_memory_bytes"),
        submitted_at=job.submitted_at,
        code=answer.code,
        message=answer.message,
        position=answer.position,
        blockers=list(answer.blockers),
        eta=answer.eta,
        eta_unknown=answer.eta_unknown,
    )
