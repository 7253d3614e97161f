"""The objective of each trial over time: the points its job reported (``job_metrics`` of the
objective's name), against the step or the experiment's time metric.

A point of the time metric belongs to the objective's point that the same call of
``gpupool.metrics.log`` reported (the same attempt, time and step), as the experiments
pipeline pairs them when it judges a trial at its rungs. Each trial keeps at most ``limit``
points, thinned evenly inside the database (its first and last kept), so a page over a long
search reads a bounded number of rows.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.orm import Session, aliased

from gpupool.domain.experiments import ExperimentSpec, TrialState
from gpupool.domain.views import View
from gpupool.services.core import Principal, Reads
from gpupool.services.experiments._experiments import find
from gpupool.store.models import ExperimentModel, JobMetricModel, TrialModel

MAX_POINTS = 500  # of one trial's curve, unless the caller asks for fewer


class TrialCurve(View):
    """One trial's objective, in the order reported: (time, value) pairs."""

    number: int
    job_id: int | None
    state: TrialState
    points: list[tuple[float, float]]
    reported: int = Field(description="how many points it reported (before thinning)")


class CurvesView(View):
    """Every trial's curve of an experiment (trials without a job or a point have none)."""

    experiment: int
    metric: str
    time_metric: str
    trials: list[TrialCurve]


def curves(ctx: Reads, who: Principal, ref: str, limit: int = MAX_POINTS) -> CurvesView:
    """The curves of experiment ``ref`` (its id, or its name); NotFound where the caller is
    not a member of its team, as ``show`` answers. ``limit``: points kept per trial (2..500)."""
    limit = max(2, min(limit, MAX_POINTS))
    with ctx.db.reader() as session:
        row = find(session, who, ref)
        spec = ExperimentSpec.model_validate(row.spec)
        metric, clock = spec.objective.metric, spec.stopping.time_metric
        found = _points(session, row, metric, clock, limit)
        trials = session.scalars(
            select(TrialModel).where(TrialModel.experiment_id == row.id).order_by(TrialModel.number)
        ).all()
        shown = [_curve(trial, found.get(trial.job_id, ([], 0))) for trial in trials]
    return CurvesView(experiment=row.id, metric=metric, time_metric=clock, trials=shown)


def _curve(trial: TrialModel, found: tuple[list[tuple[float, float]], int]) -> TrialCurve:
    points, reported = found
    return TrialCurve(
        number=trial.number,
        job_id=trial.job_id,
        state=TrialState(trial.state),
        points=points,
        reported=reported,
    )


def _points(
    session: Session, row: ExperimentModel, metric: str, clock: str, limit: int
) -> dict[int | None, tuple[list[tuple[float, float]], int]]:
    """job id -> (its kept points, how many it reported)."""
    numbered = _numbered(row.id, metric, clock).subquery()
    last = numbered.c.reported - 1
    evenly = ((numbered.c.rank - 1) * (limit - 1)) % func.nullif(last, 0) < limit - 1
    query = (
        select(numbered.c.job_id, numbered.c.x, numbered.c.y, numbered.c.reported)
        .where(or_(numbered.c.reported <= limit, evenly))
        .order_by(numbered.c.job_id, numbered.c.rank)
    )
    found: dict[int | None, tuple[list[tuple[float, float]], int]] = {}
    for job_id, x, y, reported in session.execute(query):
        found.setdefault(job_id, ([], reported))[0].append((float(x), float(y)))
    return found


def _numbered(experiment_id: int, metric: str, clock: str) -> Select[Any]:
    """The objective's points of the experiment's trials with their x, each numbered in its
    job (``rank``, from 1) beside its job's count (``reported``).

    Kept: the point of rank r out of n where an integer lies in (t(r-1), t(r)], t(r) =
    (r-1)(limit-1)/(n-1): exactly ``limit`` points, evenly spread, the first and the last."""
    point, clock_point = aliased(JobMetricModel), aliased(JobMetricModel)
    x = point.step if clock == "step" else clock_point.value
    query = (
        select(
            point.job_id,
            x.label("x"),
            point.value.label("y"),
            func.row_number().over(partition_by=point.job_id, order_by=point.id).label("rank"),
            func.count().over(partition_by=point.job_id).label("reported"),
        )
        .join(TrialModel, TrialModel.job_id == point.job_id)
        .where(TrialModel.experiment_id == experiment_id, point.name == metric)
    )
    if clock == "step":
        return query.where(point.step.is_not(None))
    same_call = and_(
        clock_point.job_id == point.job_id,
        clock_point.attempt == point.attempt,
        clock_point.at == point.at,
        clock_point.step.is_not_distinct_from(point.step),
        clock_point.name == clock,
    )
    return query.join(clock_point, same_call)
