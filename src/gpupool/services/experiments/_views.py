"""The experiments' read models, built while the caller's transaction is open."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.domain.experiments import (
    BestView,
    ExperimentDetailView,
    ExperimentSpec,
    ExperimentStatus,
    ExperimentView,
    TrialState,
    TrialView,
)
from gpupool.store.models import ExperimentModel, TrialModel


def experiment_view(session: Session, row: ExperimentModel) -> ExperimentView:
    return ExperimentView(**_fields(session, row))


def detail_view(session: Session, row: ExperimentModel) -> ExperimentDetailView:
    trials = session.scalars(
        select(TrialModel).where(TrialModel.experiment_id == row.id).order_by(TrialModel.number)
    ).all()
    return ExperimentDetailView(
        **_fields(session, row), spec=row.spec, trial_list=[trial_view(t) for t in trials]
    )


def trial_view(trial: TrialModel) -> TrialView:
    return TrialView(
        number=trial.number,
        job_id=trial.job_id,
        state=TrialState(trial.state),
        params=trial.params,
        rung=trial.rung,
        value=trial.value,
        time=trial.time,
        message=trial.message,
        created_at=trial.created_at,
        ended_at=trial.ended_at,
    )


def best_view(session: Session, row: ExperimentModel) -> BestView | None:
    if row.best_trial is None or row.best_value is None:
        return None
    trial = session.scalar(
        select(TrialModel).where(
            TrialModel.experiment_id == row.id, TrialModel.number == row.best_trial
        )
    )
    if trial is None:
        return None
    return BestView(
        trial=trial.number, job_id=trial.job_id, value=row.best_value, params=trial.params
    )


def _fields(session: Session, row: ExperimentModel) -> dict:
    spec = ExperimentSpec.model_validate(row.spec)
    counts = dict(
        session.execute(
            select(TrialModel.state, func.count())
            .where(TrialModel.experiment_id == row.id)
            .group_by(TrialModel.state)
        ).all()
    )
    return {
        "id": row.id,
        "name": row.name,
        "team": row.team.name,
        "user": row.user.name,
        "status": ExperimentStatus(row.status),
        "reason": row.reason,
        "message": row.message,
        "objective": spec.objective,
        "sampler": spec.sampler.name,
        "stopping": spec.stopping.name,
        "max_trials": spec.max_trials,
        "max_concurrent": spec.max_concurrent,
        "trials": {state.value: counts.get(state.value, 0) for state in TrialState},
        "best": best_view(session, row),
        "created_at": row.created_at,
        "ended_at": row.ended_at,
    }
