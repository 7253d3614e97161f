"""The experiments pipeline's rules (``Progress.step``), one pass over the active ones.

Per experiment: load its row and trials with their jobs' states (a read transaction), read
its trials' new metric points (the objective and the time metric, from ``job_metrics``
after the last id read), decide in memory (``_decide``: the study asks outside any
transaction), and apply the plan in one transaction guarded by the experiment's
``version``, so that a pause or stop made meanwhile wins and the pass is thrown away. Any
failure throws away what the pipeline held of that experiment: the next pass rebuilds it
from the tables.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session, lazyload

from gpupool.domain.experiments import ExperimentSpec, ExperimentStatus, TrialState
from gpupool.domain.jobs import JobKind, Reason, Role
from gpupool.errors import GpupoolError
from gpupool.services import identity, jobs
from gpupool.services.core import Principal, Submits
from gpupool.services.experiments._decide import Live, Plan, TrialRow, decide
from gpupool.services.experiments._experiments import ACTIVE, cancel_trials, end, trial_spec
from gpupool.services.experiments._rungs import Verdict
from gpupool.store.models import (
    AttemptModel,
    ExperimentModel,
    JobMetricModel,
    JobModel,
    MetricCursorModel,
    TrialModel,
)

log = logging.getLogger(__name__)

# the experiment's own columns: its owner and team (joined by default, with the owner's
# teams) are read only when a pass needs them, a few times per pass fewer queries
_ROW_ONLY = (lazyload("*"),)


class _Stale(Exception):
    """The experiment changed since it was loaded (a user paused or stopped it)."""


class Progress:
    """Holds each active experiment's ``Live`` state between passes (rebuilt from the
    tables when missing), owned by the experiments pipeline."""

    def __init__(self) -> None:
        self._live: dict[int, Live] = {}
        self.active = True  # the last pass found an active experiment (at start: look)
        self.again = False  # the last pass left trials to ask for: pass again at once

    def step(self, ctx: Submits) -> int:
        """One pass over the active experiments; how many changed."""
        with ctx.db.reader() as session:
            ids = list(
                session.scalars(
                    select(ExperimentModel.id).where(ExperimentModel.status.in_(ACTIVE))
                )
            )
        self.active, self.again = bool(ids), False
        for gone in set(self._live) - set(ids):
            del self._live[gone]
        changed = 0
        for experiment_id in ids:
            try:
                changed += self._one(ctx, experiment_id)
            except _Stale:
                self._live.pop(experiment_id, None)
            except Exception:
                self._live.pop(experiment_id, None)
                raise
        return changed

    def forget(self, experiment_id: int) -> None:
        self._live.pop(experiment_id, None)

    def _one(self, ctx: Submits, experiment_id: int) -> int:
        now = ctx.clock.now()
        with ctx.db.reader() as session:
            row = session.get(ExperimentModel, experiment_id, options=_ROW_ONLY)
            if row is None or row.status not in ACTIVE:
                return 0
            status, made, version = ExperimentStatus(row.status), row.trials_made, row.version
            best_now = (row.best_trial, row.best_value)
            trials = _trial_rows(session, experiment_id)
            live = self._live.get(experiment_id) or _rebuild(session, row)
            _read_points(session, live, trials)
        self._live[experiment_id] = live
        plan = decide(live, status, made, trials, now)
        self.again |= plan.more
        if not plan.changes and plan.best == best_now:
            return 0
        _apply(ctx, experiment_id, version, plan, now)
        if plan.end is not None:
            self._live.pop(experiment_id, None)
        return 1


def _trial_rows(session: Session, experiment_id: int) -> list[TrialRow]:
    cursor, trial = MetricCursorModel, TrialModel
    read = and_(cursor.job_id == JobModel.id, cursor.attempt == JobModel.attempts)
    query = (
        select(
            trial.number,
            trial.job_id,
            trial.state,
            trial.params,
            JobModel.status,
            JobModel.reason,
            JobModel.message,
            JobModel.ended_at,
            cursor.done,
            trial.value,
            trial.time,
        )  # columns in TrialRow's order, not ORM rows: every pass reads every trial
        .outerjoin(JobModel, JobModel.id == trial.job_id)
        .outerjoin(cursor, read)
        .where(trial.experiment_id == experiment_id)
        .order_by(trial.number)
    )
    return [TrialRow(*row[:8], bool(row[8]), *row[9:]) for row in session.execute(query)]


def _rebuild(session: Session, row: ExperimentModel) -> Live:
    """What the pipeline holds of an experiment, from the tables: the study with every
    trial put back, each trial's curve read again, the verdicts as recorded.

    Optuna (and numpy, which it loads) is imported here, when a study is first needed: not
    by every server start (about a tenth of its imports), nor by a pool without experiments."""
    from gpupool.services.experiments._studies import KnownTrial, Study

    spec = ExperimentSpec.model_validate(row.spec)
    trials = session.scalars(
        select(TrialModel).where(TrialModel.experiment_id == row.id).order_by(TrialModel.number)
    ).all()
    live = Live(spec, Study(row.id, spec))
    rows = [TrialRow(t.number, t.job_id, t.state, t.params, None, None, None, None, False)
            for t in trials]  # fmt: skip
    _read_points(session, live, rows)
    rungs = spec.stopping.rungs()
    for trial in trials:
        for rung, (value, rank, of, keep) in (trial.rungs or {}).items():
            at = rungs[int(rung)] if int(rung) < len(rungs) else float("nan")
            live.verdicts[(trial.number, int(rung))] = Verdict(
                trial.number, int(rung), at, value, int(rank), int(of), int(keep)
            )
    last, curves = live.last, live.curves
    known = [
        KnownTrial(t.number, t.params, t.state, last.get(t.number), curves.get(t.number, []))
        for t in trials
    ]
    live.study = Study.rebuild(row.id, spec, known)
    return live


def _read_points(session: Session, live: Live, trials: Sequence[TrialRow]) -> None:
    """The trials' new points of the objective (and of the time metric, when it is not
    the step), after the last id read, into ``live``."""
    by_job = {t.job_id: t.number for t in trials if t.job_id is not None}
    if not by_job:
        return
    metric, clock = live.spec.objective.metric, live.spec.stopping.time_metric
    names = {metric} if clock == "step" else {metric, clock}
    metrics = JobMetricModel
    rows = session.execute(
        select(
            metrics.id,
            metrics.job_id,
            metrics.attempt,
            metrics.name,
            metrics.step,
            metrics.at,
            metrics.value,
        )  # fmt: skip
        .where(metrics.job_id.in_(by_job), metrics.name.in_(names), metrics.id > live.cursor)
        .order_by(metrics.id)
    ).all()
    times: dict[tuple[int, int, float, int | None], float] = {}
    for _id, job_id, attempt, name, step, at, value in rows:
        if name == clock:
            times[(job_id, attempt, at, step)] = value
    for _id, job_id, attempt, name, step, at, value in rows:
        live.cursor = max(live.cursor, _id)
        if name != metric:
            continue
        number = by_job[job_id]
        live.last[number] = value
        time = step if clock == "step" else times.get((job_id, attempt, at, step))
        if time is not None:
            live.curves.setdefault(number, []).append((float(time), value))


def _apply(ctx: Submits, experiment_id: int, version: int, plan: Plan, now: float) -> None:
    """The plan, in one transaction guarded by the experiment's version."""
    try:
        with ctx.db.session() as session:
            row = _guarded(session, experiment_id, version)
            _apply_trials(session, experiment_id, plan, now)
            for job_id, standing in plan.standings.items():
                session.execute(
                    update(JobModel).where(JobModel.id == job_id).values(standing=standing)
                )
            _stop_early(session, plan.stops, now)
            _make_trials(ctx, session, row, plan, now)
            if plan.best is not None:
                row.best_trial, row.best_value = plan.best
            if plan.end is not None:
                end(session, row, *plan.end, now)
                cancel_trials(session, row, jobs_principal(row), now)
    except _Refused as refused:
        _fail(ctx, experiment_id, version, refused.message, now)
        raise _Stale from None
    if plan.stops:
        ctx.loop.stops_recorded()
    if plan.new or plan.end:
        ctx.loop.wake()


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _guarded(session: Session, experiment_id: int, version: int) -> ExperimentModel:
    moved = session.execute(
        update(ExperimentModel)
        .where(ExperimentModel.id == experiment_id, ExperimentModel.version == version)
        .values(version=version + 1)
    )
    if not moved.rowcount:
        raise _Stale
    row = session.get(ExperimentModel, experiment_id, options=_ROW_ONLY)  # read after the update
    assert row is not None
    return row


def _apply_trials(session: Session, experiment_id: int, plan: Plan, now: float) -> None:
    for number, values in plan.trials.items():
        if "state" in values and TrialState(values["state"]).is_final:
            values.setdefault("ended_at", now)
        session.execute(
            update(TrialModel)
            .where(TrialModel.experiment_id == experiment_id, TrialModel.number == number)
            .values(**values)
        )


def _stop_early(session: Session, stops: list[tuple[int, str]], now: float) -> None:
    """Each trial stopped early: its running attempt asked to stop, or its job cancelled
    if it waits in the queue."""
    for job_id, message in stops:
        if jobs.cancel_pending(session, job_id, now, message, Reason.EARLY_STOPPED):
            continue
        attempt = session.scalar(
            select(AttemptModel.id).where(
                AttemptModel.job_id == job_id, AttemptModel.status.in_(jobs.ACTIVE_ATTEMPT)
            )
        )
        if attempt is not None:
            jobs.record_stop(session, jobs.stopped_early(attempt, job_id, message), now)


def _make_trials(
    ctx: Submits, session: Session, row: ExperimentModel, plan: Plan, now: float
) -> None:
    if not plan.new:
        return
    spec = ExperimentSpec.model_validate(row.spec)
    nodes, limits = ctx.loop.recent_nodes(), jobs.JobLimits.of(ctx.settings)
    for number, params in plan.new:
        try:
            owner = identity.principal_of(session, row.user_id)
            job_spec = trial_spec(spec, params, number)
            job = jobs.submit(session, owner, job_spec, nodes, now, limits, kind=JobKind.TRIAL,
                              platform_env=trial_env(row, number, params))  # fmt: skip
        except GpupoolError as error:
            raise _Refused(f"trial {number} was refused: {error.message}") from None
        session.add(TrialModel(
            experiment_id=row.id, number=number, job_id=job.id, params=params,
            state=TrialState.PENDING.value, rungs={}, created_at=now,
        ))  # fmt: skip
    row.trials_made = plan.new[-1][0]


def trial_env(row: ExperimentModel, number: int, params: dict[str, Any]) -> dict[str, str]:
    """What a trial's job is told of itself (never part of its spec)."""
    return {
        "GPUPOOL_PARAMS": json.dumps(params, sort_keys=True),
        "GPUPOOL_TRIAL_ID": str(number),
        "GPUPOOL_EXPERIMENT": row.name,
        "GPUPOOL_EXPERIMENT_ID": str(row.id),
    }


def _fail(ctx: Submits, experiment_id: int, version: int, message: str, now: float) -> None:
    with ctx.db.session() as session:
        row = session.get(ExperimentModel, experiment_id)
        if row is None or row.version != version or row.status not in ACTIVE:
            return
        end(session, row, ExperimentStatus.FAILED, "TrialRefused", message, now)
        cancel_trials(session, row, jobs_principal(row), now)
    ctx.loop.wake()


def jobs_principal(row: ExperimentModel) -> Principal:
    """The platform acting on the experiment's own trials (their cancel's events say so)."""
    return Principal(row.user_id, f"experiment {row.name}", Role.ADMIN, frozenset({row.team_id}))
