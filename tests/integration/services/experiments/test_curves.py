"""Each trial's objective over time, as an experiment's page draws it (a real database, SQLite
and PostgreSQL: the thinning is done by their window functions)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gpupool.domain.jobs import Role
from gpupool.errors import NotFound
from gpupool.services.core import Principal
from gpupool.services.experiments import curves
from gpupool.store.db import Database, prepare
from gpupool.store.models import (
    ExperimentModel,
    JobMetricModel,
    JobModel,
    TeamModel,
    TrialModel,
    UserModel,
)

SPEC: dict[str, Any] = {
    "name": "search",
    "team": "ml",
    "objective": {"metric": "error"},
    "parameters": {"x": {"type": "float", "low": 0, "high": 1}},
    "trial": {"command": ["true"]},
}


@dataclass
class Reads:
    db: Database


@pytest.fixture
def ctx(database_url: str) -> Iterator[Reads]:
    """Team ml with experiment 1 (trials 1 to 3 run as jobs 1 to 3; trial 4 has no job yet)
    and team other; user ada of ml."""
    database = Database(database_url)
    prepare(database)
    with database.session() as session:
        session.add_all([TeamModel(id=1, name="ml", created_at=0.0)])
        session.add_all([TeamModel(id=2, name="other", created_at=0.0)])
        session.add(UserModel(id=1, name="ada", role="member", created_at=0.0))
        session.flush()
        session.add(_experiment(1, SPEC))
        for number in (1, 2, 3, 4):
            job_id = number if number < 4 else None
            if job_id:
                session.add(_job(job_id))
            session.flush()
            session.add(_trial(1, number, job_id))
    yield Reads(database)
    database.dispose()


ADA = Principal(user_id=1, name="ada", role=Role.MEMBER, team_ids=frozenset({1}))
OUTSIDER = Principal(user_id=1, name="eve", role=Role.MEMBER, team_ids=frozenset({2}))


def test_each_trial_gets_its_objective_against_the_step_in_the_order_reported(
    ctx: Reads,
) -> None:
    _report(ctx.db, 1, [(1, "error", 0.9), (1, "loss", 5.0), (2, "error", 0.5)])
    _report(ctx.db, 2, [(None, "error", 0.7), (3, "error", 0.4)])  # no step: not drawn

    found = curves(ctx, ADA, "1")

    assert (found.metric, found.time_metric) == ("error", "step")
    by_number = {t.number: t for t in found.trials}
    assert by_number[1].points == [(1.0, 0.9), (2.0, 0.5)]
    assert by_number[2].points == [(3.0, 0.4)]
    assert by_number[3].points == [] and by_number[4].points == []
    assert by_number[4].job_id is None
    assert curves(ctx, ADA, "search").trials == found.trials  # by name too


def test_a_long_curve_is_thinned_evenly_keeping_its_first_and_last_points(ctx: Reads) -> None:
    _report(ctx.db, 1, [(step, "error", float(step)) for step in range(1000)])
    _report(ctx.db, 2, [(step, "error", float(step)) for step in range(7)])

    found = {t.number: t for t in curves(ctx, ADA, "1", limit=10).trials}

    xs = [x for x, _ in found[1].points]
    assert len(xs) == 10 and xs[0] == 0 and xs[-1] == 999
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    assert max(gaps) - min(gaps) <= 1, gaps  # evenly
    assert found[1].reported == 1000
    assert [x for x, _ in found[2].points] == list(range(7))  # short: every point


def test_against_a_time_metric_each_point_takes_the_value_logged_with_it(ctx: Reads) -> None:
    _set_spec(ctx.db, SPEC | {"stopping": {"time_metric": "epoch"}})
    _report(
        ctx.db,
        1,
        [(None, "error", 0.9), (None, "epoch", 1.0)],
        at=10.0,
    )
    _report(ctx.db, 1, [(None, "error", 0.6), (None, "epoch", 2.0)], at=20.0)
    _report(ctx.db, 1, [(None, "error", 0.5)], at=30.0)  # no epoch with it: not drawn

    found = {t.number: t for t in curves(ctx, ADA, "1").trials}

    assert found[1].points == [(1.0, 0.9), (2.0, 0.6)]


def test_another_teams_member_is_told_there_is_no_such_experiment(ctx: Reads) -> None:
    _report(ctx.db, 1, [(1, "error", 0.9)])
    for ref in ("1", "search"):
        with pytest.raises(NotFound):
            curves(ctx, OUTSIDER, ref)


# -- rows ------------------------------------------------------------------------------------


def _experiment(experiment_id: int, spec: dict[str, Any]) -> ExperimentModel:
    return ExperimentModel(
        id=experiment_id,
        name=spec["name"],
        team_id=1,
        user_id=1,
        spec=spec,
        status="running",
        trials_made=4,
        version=0,
        created_at=0.0,
    )


def _job(job_id: int) -> JobModel:
    return JobModel(id=job_id, user_id=1, team_id=1, spec={}, status="running", submitted_at=0.0)


def _trial(experiment_id: int, number: int, job_id: int | None) -> TrialModel:
    return TrialModel(
        experiment_id=experiment_id,
        number=number,
        job_id=job_id,
        params={"x": number / 10},
        state="running" if job_id else "pending",
        rungs={},
        created_at=0.0,
    )


def _report(
    db: Database, job_id: int, points: list[tuple[int | None, str, float]], at: float = 1.0
) -> None:
    """Points of attempt 1 of the job; those of one call share ``at`` (one log call)."""
    with db.session() as session:
        for i, (step, name, value) in enumerate(points):
            when = at if step is None else at + i
            row = JobMetricModel(
                job_id=job_id, attempt=1, name=name, step=step, at=when, value=value
            )
            session.add(row)


def _set_spec(db: Database, spec: dict[str, Any]) -> None:
    with db.session() as session:
        session.get(ExperimentModel, 1).spec = spec
