"""Experiments as their users meet them: create, list, show, pause, resume, stop, best.

Every call sees only the experiments of the caller's teams; one of another team is answered
as one that does not exist. Creating checks the trial's job at once (filled in with a point
of the space, as a submit would check it), so a mistake in the template is a 422 now, not a
failed experiment later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpupool.domain.experiments import (
    ExperimentSpec,
    ExperimentStatus,
    ExperimentView,
    Parameter,
    TrialState,
    fill,
)
from gpupool.domain.jobs import JobSpec, JobStatus
from gpupool.errors import Conflict, NotFound, invalid_with_code
from gpupool.scheduler.types import NodeCapacity
from gpupool.services import identity, jobs
from gpupool.services.core import Principal, Reads
from gpupool.services.experiments._ports import Runs
from gpupool.services.experiments._views import detail_view, experiment_view
from gpupool.store.models import ExperimentModel, JobModel, TrialModel

ACTIVE = (ExperimentStatus.RUNNING.value, ExperimentStatus.PAUSED.value)


def create(ctx: Runs, who: Principal, spec: ExperimentSpec) -> ExperimentView:
    """Make the experiment; its pipeline asks for its first trials at once."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        limits = jobs.JobLimits.of(ctx.settings)
        row = new_experiment(session, who, spec, ctx.loop.recent_nodes(), now, limits)
        shown = experiment_view(session, row)
    ctx.experiments.wake()
    return shown


def new_experiment(
    session: Session,
    who: Principal,
    spec: ExperimentSpec,
    nodes: Sequence[NodeCapacity],
    now: float,
    limits: jobs.JobLimits,
) -> ExperimentModel:
    """The experiment's row, in the caller's transaction (a job file's kind Experiment)."""
    who.require_member()
    team = identity.acting_team(session, who, spec.team, "run an experiment in")
    _refuse_twin(session, team.id, spec.name)
    jobs.admit(session, who, trial_spec(spec, sample_point(spec), 0), nodes, limits)
    stored = spec.model_copy(update={"team": team.name}).model_dump(mode="json")
    row = ExperimentModel(
        name=spec.name,
        team_id=team.id,
        user_id=who.user_id,
        spec=stored,
        status=ExperimentStatus.RUNNING.value,
        reason="Created",
        message=f"created by {who.name}: asking for its first trials",
        trials_made=0,
        version=0,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def trial_spec(spec: ExperimentSpec, params: dict[str, Any], number: int) -> JobSpec:
    """Trial ``number``'s job: the template filled in with ``params``, in the experiment's
    team, named after it unless the template names it; InvalidRequest naming the field."""
    body = fill(spec.trial, params)
    body.setdefault("name", f"{spec.name}-{number}")
    body["team"] = spec.team
    try:
        return JobSpec.model_validate(body)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem.get("loc", ()))
        message = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        raise invalid_with_code(str(problem.get("type", "")))(
            f"trial.{where}: {message}" if where else f"trial: {message}",
            fields=[{"field": f"trial.{where}".rstrip("."), "message": message}],
        ) from None


def sample_point(spec: ExperimentSpec) -> dict[str, Any]:
    """A point of the space to check the template with: each parameter's low, or first
    choice."""
    return {name: _first(p) for name, p in spec.parameters.items()}


def list_experiments(
    ctx: Reads, who: Principal, include_ended: bool = True
) -> list[ExperimentView]:
    with ctx.db.reader() as session:
        query = select(ExperimentModel).order_by(ExperimentModel.id.desc()).limit(1000)
        if not who.is_admin:
            query = query.where(ExperimentModel.team_id.in_(who.team_ids))
        if not include_ended:
            query = query.where(ExperimentModel.status.in_(ACTIVE))
        return [experiment_view(session, row) for row in session.scalars(query)]


def show(ctx: Reads, who: Principal, ref: str) -> Any:
    """The experiment with its trials (``ExperimentDetailView``)."""
    with ctx.db.reader() as session:
        return detail_view(session, find(session, who, ref))


def pause(ctx: Runs, who: Principal, ref: str) -> ExperimentView:
    """No new trials; those running go on and are still judged."""
    return _move(ctx, who, ref, ExperimentStatus.RUNNING, ExperimentStatus.PAUSED, "Paused")


def resume(ctx: Runs, who: Principal, ref: str) -> ExperimentView:
    return _move(ctx, who, ref, ExperimentStatus.PAUSED, ExperimentStatus.RUNNING, "Resumed")


def stop(ctx: Runs, who: Principal, ref: str) -> ExperimentView:
    """End it: its trials that have not ended are cancelled (their jobs stopped)."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        row = _acted_on(session, who, ref)
        if ExperimentStatus(row.status).is_final:
            raise Conflict(f"experiment {row.name} already ended ({row.status}): nothing to stop")
        message = f"stopped by {who.name}"
        end(session, row, ExperimentStatus.STOPPED, "Stopped", message, now)
        cancel_trials(session, row, who, now)
        shown = experiment_view(session, row)
    ctx.loop.wake()
    ctx.experiments.wake()
    return shown


def end(
    session: Session,
    row: ExperimentModel,
    status: ExperimentStatus,
    reason: str,
    message: str,
    now: float,
) -> None:
    row.status, row.reason, row.message, row.ended_at = status.value, reason, message, now
    row.version += 1


def cancel_trials(session: Session, row: ExperimentModel, who: Principal, now: float) -> None:
    """Cancel every trial of ``row`` that has not ended, and its job."""
    active = [TrialState.PENDING.value, TrialState.RUNNING.value]
    trials = session.scalars(
        select(TrialModel).where(TrialModel.experiment_id == row.id, TrialModel.state.in_(active))
    ).all()
    for trial in trials:
        trial.state, trial.ended_at = TrialState.CANCELLED.value, now
        trial.message = f"cancelled with its experiment ({row.message})"
        if trial.job_id is not None:
            _cancel_job(session, trial.job_id, who, now)


def find(session: Session, who: Principal, ref: str) -> ExperimentModel:
    """An experiment by id, or by name (the newest of that name in the caller's teams)."""
    query = select(ExperimentModel)
    if ref.isdigit():
        query = query.where(ExperimentModel.id == int(ref))
    else:
        query = query.where(ExperimentModel.name == ref).order_by(ExperimentModel.id.desc())
    if not who.is_admin:
        query = query.where(ExperimentModel.team_id.in_(who.team_ids))
    row = session.scalars(query.limit(1)).first()
    if row is None:
        raise NotFound(f"no experiment {ref}: list your experiments with 'gpupool experiment ls'")
    return row


def _move(
    ctx: Runs,
    who: Principal,
    ref: str,
    was: ExperimentStatus,
    to: ExperimentStatus,
    reason: str,
) -> ExperimentView:
    with ctx.db.session() as session:
        row = _acted_on(session, who, ref)
        if row.status == to.value:
            return experiment_view(session, row)
        moved = session.execute(
            update(ExperimentModel)
            .where(ExperimentModel.id == row.id, ExperimentModel.status == was.value)
            .values(
                status=to.value,
                reason=reason,
                message=f"{reason.lower()} by {who.name}",
                version=ExperimentModel.version + 1,
            )
        )
        if not moved.rowcount:
            raise Conflict(f"experiment {row.name} is {row.status}: it cannot be {reason.lower()}")
        session.refresh(row)
        shown = experiment_view(session, row)
    ctx.experiments.wake()
    return shown


def _acted_on(session: Session, who: Principal, ref: str) -> ExperimentModel:
    row = find(session, who, ref)
    who.require_member()
    if not who.can_act_on_team(row.team_id):
        raise NotFound(f"no experiment {ref}: list your experiments with 'gpupool experiment ls'")
    return row


def _refuse_twin(session: Session, team_id: int, name: str) -> None:
    twin = session.scalar(
        select(func.count())
        .select_from(ExperimentModel)
        .where(
            ExperimentModel.team_id == team_id,
            ExperimentModel.name == name,
            ExperimentModel.status.in_(ACTIVE),
        )
    )
    if twin:
        raise Conflict(
            f"the team already runs an experiment named {name}: stop it first "
            f"(gpupool experiment stop {name}), or choose another name"
        )


def _cancel_job(session: Session, job_id: int, who: Principal, now: float) -> None:
    job = session.get(JobModel, job_id)
    if job is not None and not JobStatus(job.status).is_final:
        jobs.cancel(session, who, job_id, now)


def _first(parameter: Parameter) -> Any:
    if parameter.type == "categorical":
        return (parameter.choices or [None])[0]
    if parameter.type == "int":
        return int(parameter.low or 0)
    return parameter.low
