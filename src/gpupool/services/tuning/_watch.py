"""What the tuning watch decides besides running the queued tunings: when the nightly autotune
is due, and whether an adopted tuning kept its word.

The rollback check, ``autotune_check_seconds`` (a week) after a tuning adopted settings:
the jobs submitted since then that ended are replayed under those settings; when their real
average JCT is more than ``WORSE`` above the replay's, the replay does not foresee this pool
under these settings, and the version before comes back (source watch, the figures in its
reason). A version no longer live is left alone (an admin or a later tuning moved on).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from sqlalchemy import select, update

from gpupool.domain.schedsettings import SchedulerKnobs
from gpupool.domain.tuning import TuneRequest
from gpupool.services import schedsettings
from gpupool.services.core import Submits
from gpupool.services.tuning._pool import history, live_policy, pool_nodes, team_quotas
from gpupool.services.tuning._tunes import queue
from gpupool.sim.engine import simulate
from gpupool.store.models import SchedulerSettingsModel, SchedulerTuneModel

WORSE = 0.10  # real avg JCT above the replay's by more than this: roll back
MIN_JOBS = 20  # fewer ended jobs since the adoption say too little to judge
HOUR = 3600.0


def autotune_due(ctx: Submits, now: float) -> bool:
    """Whether tonight's autotune should be queued: nightly, within the hour after
    ``autotune_hour`` (local time), and none queued since that hour began."""
    if ctx.settings.autotune != "nightly":
        return False
    at = _tonight(now, ctx.settings.autotune_hour)
    if not at <= now < at + HOUR:
        return False
    with ctx.db.reader() as session:
        last = session.scalars(
            select(SchedulerTuneModel.created_at)
            .where(SchedulerTuneModel.source == "autotune")
            .order_by(SchedulerTuneModel.id.desc())
            .limit(1)
        ).first()
    return last is None or last < at


def queue_autotune(ctx: Submits, now: float) -> int:
    """Tonight's tuning: the defaults of ``TuneRequest`` (14 days, 7 held out), applied."""
    return queue(ctx, TuneRequest(apply=True), "autotune", None, now).id


def check_adoptions(ctx: Submits, now: float) -> list[int]:
    """Judge each adopted tuning whose week is over; the tunings judged."""
    due = now - ctx.settings.autotune_check_seconds
    with ctx.db.reader() as session:
        rows = session.execute(
            select(SchedulerTuneModel.id, SchedulerTuneModel.adopted_version)
            .where(
                SchedulerTuneModel.adopted_version.is_not(None),
                SchedulerTuneModel.checked.is_(None),
                SchedulerTuneModel.ended_at <= due,
            )
            .order_by(SchedulerTuneModel.id)
        ).all()
    for tune_id, version in rows:
        checked = _check(ctx, tune_id, version, now)
        with ctx.db.session() as session:
            session.execute(
                update(SchedulerTuneModel)
                .where(SchedulerTuneModel.id == tune_id)
                .values(checked=checked)
            )
    return [tune_id for tune_id, _version in rows]


def _check(ctx: Submits, tune_id: int, version: int, now: float) -> dict[str, Any]:
    live = schedsettings.config(ctx)
    if live.version != version:
        return _said(now, f"version {live.version} is live now, not {version}: left alone")
    adopted_at = live.live.created_at if live.live else now
    jobs, trace = history(ctx, adopted_at, now)
    ended = [job for job in trace.jobs if not job.censored and job.observed_jct is not None]
    if len(ended) < MIN_JOBS:
        return _said(now, f"only {len(ended)} jobs ended since the adoption: too few to judge")
    result = simulate(
        trace.jobs, pool_nodes(ctx), settings=live_policy(ctx), quotas=team_quotas(ctx),
        restart_cost=60.0,
    )  # fmt: skip
    replayed = {record.job_id: record.jct for record in result.records}
    pairs = [(job.observed_jct, replayed[job.job_id]) for job in ended if job.job_id in replayed]
    real = statistics.fmean(seen for seen, _ in pairs)
    predicted = statistics.fmean(jct for _, jct in pairs)
    figures = {"jobs": len(pairs), "real_avg_jct": real, "replayed_avg_jct": predicted}
    if real <= predicted * (1 + WORSE):
        return _said(now, "the replay foresaw the week: kept", **figures)
    made = _roll_back(ctx, tune_id, version, real, predicted)
    return _said(now, f"rolled back: version {made} restores version {version - 1}", **figures)


def _roll_back(ctx: Submits, tune_id: int, version: int, real: float, predicted: float) -> int:
    knobs = _knobs_before(ctx, version)
    worse = (real / predicted - 1) * 100 if predicted > 0 else float("inf")
    reason = (
        f"the week after tuning {tune_id} adopted version {version}, its jobs' real average "
        f"JCT ({real / HOUR:.2f} h) was {worse:.0f} % above the replay's ({predicted / HOUR:.2f}"
        f" h): back to version {version - 1}"
    )
    made = schedsettings.record(
        ctx, knobs, "watch", reason, None, expected=version, rollback_of=version - 1
    )
    return made.version


def _knobs_before(ctx: Submits, version: int) -> SchedulerKnobs:
    if version <= 1:
        return schedsettings.environment_knobs(ctx.settings)
    with ctx.db.reader() as session:
        row = session.get(SchedulerSettingsModel, version - 1)
        assert row is not None  # versions are never deleted
        return SchedulerKnobs.model_validate(row.knobs)


def _said(now: float, verdict: str, **figures: float) -> dict[str, Any]:
    return {"at": now, "verdict": verdict, **figures}


def _tonight(now: float, hour: int) -> float:
    """The latest ``hour``:00 local time at or before ``now``."""
    local = time.localtime(now)
    at = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, hour, 0, 0, 0, 0, -1))
    return at if at <= now else at - 86400.0
