"""The scheduler's settings page (``/scheduler``): the live settings, each knob beside the
server environment's value; for admins of the pool, a form that changes knobs and the history
with a button that rolls back to any version, both through the REST API. Other users read the
live settings only (the history is an admin's, as in the API)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import SignedIn, render, to_login
from gpupool.domain.schedsettings import KNOB_HELP, KNOBS, SettingsVersionView, knob_text
from gpupool.domain.units import format_duration
from gpupool.services import schedsettings, tuning

router = APIRouter(include_in_schema=False)
PAGE = "scheduler"
HISTORY_SHOWN = 100


@router.get("/scheduler", response_class=HTMLResponse)
@declare(Rule.PAGE)
def scheduler_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    shown = schedsettings.config(ctx)
    found = schedsettings.history(ctx, HISTORY_SHOWN) if who.is_admin else []
    knobs, environment = shown.knobs.model_dump(), shown.environment.model_dump()
    return render(
        "scheduler.html",
        who,
        csrf,
        page=PAGE,
        version=shown.version,
        live=None if shown.live is None else _version(shown.live),
        knobs=[_knob(name, knobs[name], environment[name]) for name in KNOBS],
        history=[_version(v) for v in found],
        tunes=[t.model_dump(mode="json") for t in tuning.list_tunes(ctx)] if who.is_admin else [],
        can_change=who.is_admin,
        choices={"packing": ("fgd", "best-fit"), "order": ("las", "gittins")},
    )


def _knob(name: str, value: Any, environment: Any) -> dict[str, Any]:
    return {
        "name": name,
        "text": knob_text(name, value),
        "environment": None if value == environment else knob_text(name, environment),
        "help": KNOB_HELP[name],
        "input": _input_value(name, value),
    }


def _input_value(name: str, value: Any) -> str:
    """What the form's field holds: durations with units, the levels as a list of them."""
    if name == "las_thresholds":
        return ", ".join(format_duration(v) for v in value)
    if name in ("starvation_factor", "packing", "order"):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return format_duration(value)


def _version(one: SettingsVersionView) -> dict[str, Any]:
    knobs = one.knobs.model_dump()
    return {
        "version": one.version,
        "source": one.source,
        "rollback_of": one.rollback_of,
        "by": one.created_by or one.source,
        "at": one.created_at,
        "reason": one.reason,
        "changed": [f"{name} = {knob_text(name, knobs[name])}" for name in one.changed],
    }
