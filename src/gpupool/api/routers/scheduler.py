"""The scheduler's live settings (``gpupool scheduler config | history | rollback``): every
signed-in user may read them; only admins of the pool change them, each change a numbered
version with who, when and why."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status
from fastapi.responses import PlainTextResponse

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.schedsettings import (
    KnobsChange,
    Rollback,
    SchedulerConfigView,
    SettingsVersionView,
)
from gpupool.domain.tuning import DAY, FidelityView, TuneRequest, TuneView
from gpupool.services import schedsettings, tuning
from gpupool.services.core import Principal

router = APIRouter(prefix="/scheduler", tags=["scheduler"])
Admin = Annotated[Principal, allow(Rule.ADMIN)]
Since = Annotated[
    float,
    Query(gt=0, le=365 * DAY, description="seconds of history back from now (86400: a day)"),
]


@router.get("/config", response_model=SchedulerConfigView)
def config(
    ctx: PlatformDep, _who: Annotated[Principal, allow(Rule.SIGNED_IN)]
) -> SchedulerConfigView:
    """The live settings (their version, 0 while none was made) and the environment's."""
    return schedsettings.config(ctx)


@router.put("/config", response_model=SchedulerConfigView)
def change(body: KnobsChange, ctx: PlatformDep, who: Admin) -> SchedulerConfigView:
    """A new version: the knobs given take these values, the others keep theirs; the next
    scheduling cycle uses it. ``409 settings_changed`` when ``if_version`` is no longer live
    (or another admin's change won), ``409 settings_unchanged`` when nothing would change."""
    return schedsettings.change(ctx, who, body)


@router.get("/config/history", response_model=list[SettingsVersionView])
def history(
    ctx: PlatformDep,
    _who: Admin,
    limit: Annotated[int, Query(ge=1, le=schedsettings.HISTORY_LIMIT)] = 100,
) -> list[SettingsVersionView]:
    """The versions, newest first: knobs, what each changed, who, when, why, and how."""
    return schedsettings.history(ctx, limit)


@router.post("/config/rollback", response_model=SchedulerConfigView)
def rollback(body: Rollback, ctx: PlatformDep, who: Admin) -> SchedulerConfigView:
    """A new version with the knobs of an earlier one (0: the server environment's)."""
    return schedsettings.rollback(ctx, who, body)


@router.get("/trace", response_class=PlainTextResponse)
def trace(ctx: PlatformDep, _who: Admin, since: Since = 14 * DAY) -> PlainTextResponse:
    """The jobs submitted in the last ``since`` seconds that ran, as the simulator's CSV
    (``gpupool simulate --trace csv:FILE``): submit, run time over all attempts, GPUs, team,
    user, needs; ``censored`` 1 for one still running; ``jct`` for one that ended."""
    text = tuning.export(ctx, since)
    return PlainTextResponse(text, media_type="text/csv")


@router.get("/fidelity", response_model=FidelityView)
def fidelity(ctx: PlatformDep, _who: Admin, since: Since = DAY) -> FidelityView:
    """The last ``since`` seconds replayed under the live settings against what happened:
    each job's JCT error; a tuning is refused while their median is above the limit."""
    return tuning.fidelity(ctx, since)


@router.post("/tunes", status_code=status.HTTP_202_ACCEPTED, response_model=TuneView)
def request_tune(body: TuneRequest, ctx: PlatformDep, who: Admin) -> TuneView:
    """Queue a tuning: the tuning watch replays the history under many settings, re-scores
    the best few on the hold-out and, with ``apply``, adopts the best when the hold-out
    improves by 5 % or more with no guard broken. Follow it at ``/scheduler/tunes/ID``."""
    queued = tuning.request(ctx, who, body)
    ctx.tunings.wake()
    return queued


@router.get("/tunes", response_model=list[TuneView])
def list_tunes(ctx: PlatformDep, _who: Admin) -> list[TuneView]:
    """The tunings, newest first (without their reports)."""
    return tuning.list_tunes(ctx)


@router.get("/tunes/{tune_id}", response_model=TuneView)
def show_tune(
    tune_id: Annotated[int, Path(ge=1, le=2**31)], ctx: PlatformDep, _who: Admin
) -> TuneView:
    """A tuning with its report: every setting tried, the best few on the hold-out, the
    decision and why."""
    return tuning.show(ctx, tune_id)
