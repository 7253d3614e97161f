"""The scheduler's live settings (``gpupool scheduler config | history | rollback``): every
signed-in user may read them; only admins of the pool change them, each change a numbered
version with who, when and why."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.schedsettings import (
    KnobsChange,
    Rollback,
    SchedulerConfigView,
    SettingsVersionView,
)
from gpupool.services import schedsettings
from gpupool.services.core import Principal

router = APIRouter(prefix="/scheduler", tags=["scheduler"])
Admin = Annotated[Principal, allow(Rule.ADMIN)]


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
