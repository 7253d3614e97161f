"""The versions of the scheduler's settings: each one a whole set of knobs, numbered by its
writer (the table's primary key refuses a second writer of the same number, so two admins
changing at once cannot both win), never changed nor deleted; the newest is live.

Version 0 is not stored: it is what the server's environment gives (``GPUPOOL_*``, then the
product's defaults), live until a first version is made, and what ``rollback 0`` restores.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.policy import Policy
from gpupool.domain.schedsettings import (
    KnobsChange,
    Rollback,
    SchedulerConfigView,
    SchedulerKnobs,
    SettingsVersionView,
    Source,
)
from gpupool.errors import Conflict, NotFound
from gpupool.services.core import Principal, Submits
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import SchedulerSettingsModel as Row

HISTORY_LIMIT = 1000


class SettingsChanged(Conflict):
    """409: the live version is not the one the caller read (or another change won)."""

    code = "settings_changed"


class SettingsUnchanged(Conflict):
    """409: the change would give the live settings again."""

    code = "settings_unchanged"


def environment_knobs(settings: Settings) -> SchedulerKnobs:
    """Version 0: the knobs the server's environment gives."""
    return SchedulerKnobs.of(settings.policy())


def live_policy(db: Database, settings: Settings) -> Policy:
    """The policy the control loop starts with: the environment's, with the live version's
    knobs (read when the server starts; later versions are handed to the loop)."""
    with db.reader() as session:
        newest = _newest(session)
    base = settings.policy()
    return base if newest is None else SchedulerKnobs.model_validate(newest.knobs).onto(base)


def config(ctx: Submits) -> SchedulerConfigView:
    """The live settings, and the environment's."""
    environment = environment_knobs(ctx.settings)
    with ctx.db.reader() as session:
        newest = _newest(session)
        live = None if newest is None else _view(newest, _previous(session, newest, environment))
    return SchedulerConfigView(
        version=0 if live is None else live.version,
        knobs=environment if live is None else live.knobs,
        environment=environment,
        live=live,
    )


def history(ctx: Submits, limit: int = HISTORY_LIMIT) -> list[SettingsVersionView]:
    """The versions, newest first, each with what it changed from the one before (versions
    are never deleted: the one before version N is N - 1, or the environment's for 1)."""
    environment = environment_knobs(ctx.settings)
    with ctx.db.reader() as session:
        rows = session.scalars(select(Row).order_by(Row.version.desc()).limit(limit + 1)).all()
    knobs = [_knobs(row) for row in rows]
    return [
        _view(row, knobs[i + 1] if i + 1 < len(rows) else environment)
        for i, row in enumerate(rows[:limit])
    ]


def change(ctx: Submits, who: Principal, body: KnobsChange) -> SchedulerConfigView:
    """A new version: the knobs ``body`` gives, the others as they are live."""
    who.require_admin()
    current = config(ctx)
    _check_expected(current, body.if_version)
    knobs = SchedulerKnobs.model_validate({**current.knobs.model_dump(), **body.given()})
    record(ctx, knobs, "admin", body.reason, who.name, expected=current.version)
    return config(ctx)


def rollback(ctx: Submits, who: Principal, body: Rollback) -> SchedulerConfigView:
    """A new version with the knobs of ``body.version`` (0: the environment's)."""
    who.require_admin()
    current = config(ctx)
    _check_expected(current, body.if_version)
    knobs = _knobs_of(ctx, body.version, current)
    record(
        ctx,
        knobs,
        "rollback",
        body.reason,
        who.name,
        expected=current.version,
        rollback_of=body.version,
    )
    return config(ctx)


def record(
    ctx: Submits,
    knobs: SchedulerKnobs,
    source: Source,
    reason: str,
    by: str | None,
    *,
    expected: int,
    rollback_of: int | None = None,
    prediction: dict[str, Any] | None = None,
) -> SettingsVersionView:
    """Make version ``expected + 1`` with ``knobs`` and hand its policy to the control loop;
    409 ``settings_changed`` when ``expected`` is no longer the live version, 409
    ``settings_unchanged`` when ``knobs`` are the live ones. Tune and its watch call it too."""
    with ctx.db.reader() as session:
        newest = _newest(session)
    if (0 if newest is None else newest.version) != expected:
        raise SettingsChanged(_changed_message(expected))
    live = environment_knobs(ctx.settings) if newest is None else _knobs(newest)
    if not knobs.differ(live):
        raise SettingsUnchanged("these are the live settings already: nothing to change")
    row = Row(
        version=expected + 1,
        knobs=knobs.model_dump(mode="json"),
        source=source,
        reason=reason,
        created_by=by,
        created_at=ctx.clock.now(),
        rollback_of=rollback_of,
        prediction=prediction,
    )
    try:
        with ctx.db.session() as session:
            session.add(row)
            session.flush()
            made = _view(row, live)
    except IntegrityError as error:  # another writer made this number first
        raise SettingsChanged(_changed_message(expected)) from error
    ctx.loop.policy_changed(knobs.onto(ctx.settings.policy()))
    return made


def _check_expected(current: SchedulerConfigView, expected: int | None) -> None:
    if expected is not None and expected != current.version:
        raise SettingsChanged(_changed_message(expected, current.version))


def _changed_message(expected: int, live: int | None = None) -> str:
    now = "" if live is None else f" (version {live} is)"
    return (
        f"version {expected} is no longer the live one{now}: someone changed the settings; "
        "read them again (gpupool scheduler config) and repeat your change if it still holds"
    )


def _knobs_of(ctx: Submits, version: int, current: SchedulerConfigView) -> SchedulerKnobs:
    if version == 0:
        return current.environment
    with ctx.db.reader() as session:
        row = session.get(Row, version)
        if row is None:
            raise NotFound(
                f"there is no version {version} of the scheduler settings: see "
                "gpupool scheduler history (0: the server environment's)"
            )
        return _knobs(row)


def _newest(session: Session) -> Row | None:
    return session.scalars(select(Row).order_by(Row.version.desc()).limit(1)).first()


def _previous(session: Session, row: Row, environment: SchedulerKnobs) -> SchedulerKnobs | None:
    if row.version == 1:
        return environment
    prior = session.get(Row, row.version - 1)
    return None if prior is None else _knobs(prior)


def _knobs(row: Row) -> SchedulerKnobs:
    return SchedulerKnobs.model_validate(row.knobs)


def _view(row: Row, previous: SchedulerKnobs | None) -> SettingsVersionView:
    knobs = SchedulerKnobs.model_validate(row.knobs)
    return SettingsVersionView(
        version=row.version,
        knobs=knobs,
        changed=knobs.differ(previous),
        source=row.source,
        reason=row.reason,
        created_by=row.created_by,
        created_at=row.created_at,
        rollback_of=row.rollback_of,
        prediction=row.prediction,
    )
