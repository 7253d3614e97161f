"""Tunings of the scheduler's settings: asked (by an admin, or by the nightly autotune),
queued, and run one at a time by the tuning watch, which hands the search to ``execute``
(replays in processes of their own: a tuning never holds the server's interpreter).

A run reads the history of the last ``window`` seconds (``_pool.history``), the pool's nodes and
the teams' quotas, and the live settings as its base; ``gpupool.sim.tuning.tune`` replays it
under many settings and says what it would adopt. With ``apply``, an "adopt" becomes a new
version of the settings (``schedsettings.record``, source tune or autotune, with the
hold-out's prediction for the rollback watch), unless the live version changed meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy import select, update

from gpupool.domain.schedsettings import SchedulerConfigView, SchedulerKnobs
from gpupool.domain.tuning import FidelityView, TuneRequest, TuneView
from gpupool.errors import ClientError, NotFound
from gpupool.services import schedsettings
from gpupool.services.core import Principal, Submits
from gpupool.services.tuning._history import csv_text, past_jobs
from gpupool.services.tuning._pool import history, live_policy, pool_nodes, team_quotas
from gpupool.sim import tuning as engine
from gpupool.store.models import SchedulerTuneModel as Row

log = logging.getLogger(__name__)

# runs ``call`` (a picklable call of the engine) and gives back what it returned
Execute = Callable[[Callable[[], Any]], Any]
LISTED = 50
FIDELITY_WORST = 20


def in_this_process(call: Callable[[], Any]) -> Any:
    return call()


def request(ctx: Submits, who: Principal, body: TuneRequest) -> TuneView:
    """Queue a tuning asked by an admin; the tuning watch runs it."""
    who.require_admin()
    return queue(ctx, body, "admin", who.name)


def queue(
    ctx: Submits, body: TuneRequest, source: str, by: str | None, now: float | None = None
) -> TuneView:
    row = Row(
        status="queued", source=source, requested_by=by, options=body.model_dump(mode="json"),
        created_at=ctx.clock.now() if now is None else now,
    )  # fmt: skip
    with ctx.db.session() as session:
        session.add(row)
        session.flush()
        return _view(row, with_report=False)


def list_tunes(ctx: Submits, limit: int = LISTED) -> list[TuneView]:
    with ctx.db.reader() as session:
        rows = session.scalars(select(Row).order_by(Row.id.desc()).limit(limit)).all()
        return [_view(row, with_report=False) for row in rows]


def show(ctx: Submits, tune_id: int) -> TuneView:
    with ctx.db.reader() as session:
        row = session.get(Row, tune_id)
        if row is None:
            raise NotFound(f"there is no tuning {tune_id}: see gpupool scheduler tunes")
        return _view(row, with_report=True)


def next_queued(ctx: Submits) -> int | None:
    with ctx.db.reader() as session:
        return session.scalars(
            select(Row.id).where(Row.status == "queued").order_by(Row.id).limit(1)
        ).first()


def interrupted(ctx: Submits) -> int:
    """Tunings left running by a server that stopped: failed, saying so (at start)."""
    with ctx.db.session() as session:
        return session.execute(
            update(Row)
            .where(Row.status == "running")
            .values(
                status="failed",
                ended_at=ctx.clock.now(),
                message="the server stopped while it ran: ask for it again",
            )  # fmt: skip
        ).rowcount


def run(ctx: Submits, tune_id: int, execute: Execute = in_this_process) -> TuneView:
    """Run a queued tuning to its end (failed, with why, on any error)."""
    with ctx.db.session() as session:
        taken = session.execute(
            update(Row)
            .where(Row.id == tune_id, Row.status == "queued")
            .values(status="running", started_at=ctx.clock.now())
        ).rowcount
    if not taken:
        return show(ctx, tune_id)
    try:
        outcome = _tune(ctx, tune_id, execute)
    except (ClientError, ValueError) as error:
        outcome = {"status": "failed", "message": str(error)}
    except Exception as error:  # a tuning must end, whatever broke it
        log.exception("tuning %d failed", tune_id)
        outcome = {"status": "failed", "message": f"the tuning broke: {error!r}"}
    with ctx.db.session() as session:
        session.execute(
            update(Row).where(Row.id == tune_id).values(ended_at=ctx.clock.now(), **outcome)
        )
    return show(ctx, tune_id)


def export(ctx: Submits, since: float) -> str:
    """The jobs submitted in the last ``since`` seconds that ran, as the simulator's CSV."""
    now = ctx.clock.now()
    with ctx.db.reader() as session:
        return csv_text(past_jobs(session, now - since, now, now))


def fidelity(ctx: Submits, since: float) -> FidelityView:
    """The last ``since`` seconds replayed under the live settings, against what happened."""
    now = ctx.clock.now()
    jobs, trace = history(ctx, now - since, now)
    found = engine.fidelity(trace, pool_nodes(ctx), live_policy(ctx), quotas=team_quotas(ctx))
    worst = [
        {**vars(error), "job_id": jobs[error.job_id - 1].job_id}
        for error in found.worst[:FIDELITY_WORST]
    ]
    return FidelityView(
        since=now - since, until=now, jobs=found.jobs, median_error=found.median_error,
        p90_error=found.p90_error, mean_error=found.mean_error, limit=found.limit,
        trusted=found.trusted, worst=worst,
    )  # fmt: skip


def _tune(ctx: Submits, tune_id: int, execute: Execute) -> dict[str, Any]:
    with ctx.db.reader() as session:
        row = session.get(Row, tune_id)
        assert row is not None
        options, source, by = TuneRequest.model_validate(row.options), row.source, row.requested_by
    now = ctx.clock.now()
    live = schedsettings.config(ctx)
    _jobs, trace = history(ctx, now - options.window, now)
    if not trace.jobs:
        return {"status": "succeeded", "decision": "refuse", "message": _NO_HISTORY}
    first = min(job.submit for job in _jobs)  # the trace's second 0
    split = now - options.holdout
    call = partial(
        engine.tune, trace, pool_nodes(ctx),
        base=live.knobs.onto(ctx.settings.policy()),
        window=(now - options.window - first, split - first),
        holdout=(split - first, now - first + 1.0),
        trials=options.trials, objective=options.objective, guards=options.guards,
        sampler=options.sampler, workers=ctx.settings.tune_workers, seed=options.seed,
        quotas=team_quotas(ctx),
    )  # fmt: skip
    report = execute(call)
    outcome: dict[str, Any] = {
        "status": "succeeded", "decision": report.decision, "message": report.reason,
        "report": report.to_dict(),
    }  # fmt: skip
    if report.decision == "adopt" and options.apply:
        outcome |= _adopt(ctx, tune_id, report, live, source, by, now)
    return outcome


def _adopt(
    ctx: Submits,
    tune_id: int,
    report: engine.TuneReport,
    live: SchedulerConfigView,
    source: str,
    by: str | None,
    now: float,
) -> dict[str, Any]:
    knobs = SchedulerKnobs.model_validate({**live.knobs.model_dump(), **(report.chosen or {})})
    prediction = {
        "tune": tune_id, "objective": report.objective, "predicted": report.predicted,
        "base": report.base_holdout.objective(report.objective) if report.base_holdout else None,
        "adopted_at": now,
    }  # fmt: skip
    reason = f"tuning {tune_id}: {report.reason}"
    kind = "autotune" if source == "autotune" else "tune"
    try:
        made = schedsettings.record(
            ctx, knobs, kind, reason, by, expected=live.version, prediction=prediction
        )
    except schedsettings.SettingsChanged:
        return {"message": f"{report.reason}; not adopted: the settings changed while it ran"}
    except schedsettings.SettingsUnchanged:
        return {"message": f"{report.reason}; the chosen settings are the live ones already"}
    return {"adopted_version": made.version}


_NO_HISTORY = "no job ran in the window: there is no history to tune on"


def _view(row: Row, with_report: bool) -> TuneView:
    return TuneView(
        id=row.id, status=row.status, source=row.source, requested_by=row.requested_by,
        options=row.options, decision=row.decision, message=row.message,
        adopted_version=row.adopted_version, created_at=row.created_at,
        started_at=row.started_at, ended_at=row.ended_at,
        report=row.report if with_report else None, checked=row.checked,
    )  # fmt: skip
