"""Teams as the API sees them: listed with what they hold, their history, created, deleted,
given a quota and members. Each function opens its own transaction and tells the control
loop (and the token cache) what changed; ``quotas``, ``users`` and ``history`` do the work.
"""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError

import gpupool.services.identity._history as history
import gpupool.services.identity._quotas as quotas
import gpupool.services.identity._users as users
from gpupool.domain.views import (
    TeamDeletedView,
    TeamHistoryView,
    TeamSeriesView,
    TeamStorageView,
    TeamUsageView,
    TeamView,
    UserView,
)
from gpupool.errors import Conflict
from gpupool.services.core import Principal, Tells
from gpupool.services.identity._ports import Forgets, TeamDeletes
from gpupool.services.identity._views import user_view
from gpupool.store.models import TeamModel


def list_teams(ctx: Tells, who: Principal) -> list[TeamView]:
    """Each team ``who`` can see, with its quota, the GPUs it holds and its pending jobs."""
    nodes = ctx.loop.recent_nodes()
    with ctx.db.reader() as session:
        visible = [t for t in users.list_teams(session) if who.can_see_team(t.id)]
        used = quotas.usage(session, nodes, [t.id for t in visible])
        admins = users.team_admins(session, [t.id for t in visible])
        return [team_view(t, used[t.id], admins[t.id]) for t in visible]


def team_history(ctx: Tells, who: Principal, hours: float, buckets: int) -> TeamHistoryView:
    """Each team ``who`` can see: GPUs held, GPUs wanted and its fair share, over the last
    ``hours`` in ``buckets`` buckets."""
    nodes = ctx.loop.recent_nodes()
    pool = float(sum(len(node.gpus) for node in nodes if node.schedulable))
    window = history.Window(ctx.clock.now(), hours, buckets)
    with ctx.db.reader() as session:
        visible = {t.name for t in users.list_teams(session) if who.can_see_team(t.id)}
        found = history.team_history(session, quotas.team_quotas(session), pool, window)
    return TeamHistoryView(
        start=window.start,
        end=window.end,
        bucket_seconds=window.width,
        pool_gpus=found.pool_gpus,
        times=window.starts(),
        teams=[TeamSeriesView(**vars(series)) for series in found.teams if series.team in visible],
    )


def create_team(ctx: Tells, name: str, quota: quotas.Quota) -> TeamView:
    """A new team with its quota (refused as a whole if the quota is)."""
    nodes = ctx.loop.recent_nodes()
    try:
        with ctx.db.session() as session:
            team = quotas.create_team(session, name, quota, nodes, ctx.clock.now())
            shown = team_view(team, quotas.Usage())
    except IntegrityError as error:
        # another server (or request) created it between the name's check and the insert:
        # the unique index on live names refused this one
        raise Conflict(f"team '{name}' already exists") from error
    ctx.loop.quotas_changed()
    return shown


def set_quota(ctx: Tells, name: str, quota: quotas.Quota, keep_storage: bool = False) -> TeamView:
    """Replace a team's quota: what ``quota`` leaves out takes its default; with
    ``keep_storage``, the team keeps its storage quota whatever ``quota.storage`` says."""
    nodes = ctx.loop.recent_nodes()
    with ctx.db.session() as session:
        now = ctx.clock.now()
        team = quotas.set_quota(session, name, quota, nodes, now, keep_storage)
        used = quotas.usage(session, nodes, [team.id])[team.id]
        shown = team_view(team, used, users.team_admins(session, [team.id])[team.id])
    ctx.loop.quotas_changed()
    return shown


def delete_team(ctx: TeamDeletes, name: str) -> TeamDeletedView:
    """Delete a team without unfinished jobs (see ``users.delete_team``)."""
    with ctx.db.session() as session:
        deleted = users.delete_team(session, name, ctx.clock.now())
    ctx.tokens.clear()  # its members' teams changed
    ctx.loop.quotas_changed()
    return TeamDeletedView(name=deleted.name, finished_jobs=deleted.finished_jobs)


def add_member(
    ctx: Forgets, who: Principal, team: str, user: str, admin: bool | None = None
) -> UserView:
    """Make ``user`` a member of ``team``: it sees and submits the team's jobs; ``admin``:
    make it a team admin of it, or not (None: as it was). ``who``: a pool admin or a team
    admin of ``team`` (see ``users.team_to_manage``)."""
    with ctx.db.session() as session:
        found = users.team_to_manage(session, who, team)
        shown = user_view(users.join_team(session, found, user, admin))
    ctx.tokens.clear()  # its teams, or the teams it administers, changed
    return shown


def remove_member(ctx: Forgets, who: Principal, team: str, user: str) -> UserView:
    """End ``user``'s membership of ``team`` (and its being a team admin of it); its jobs
    there stay in the team. ``who``: as for ``add_member``."""
    with ctx.db.session() as session:
        found = users.team_to_manage(session, who, team)
        shown = user_view(users.leave_team(session, found, user))
    ctx.tokens.clear()
    return shown


def team_view(team: TeamModel, used: quotas.Usage, admins: list[str] | None = None) -> TeamView:
    """A team, its quota, what it holds now, how many of its jobs wait, its team admins."""
    quota = quotas.quota_of(team)
    return TeamView(
        id=team.id,
        name=team.name,
        guarantee=dict(quota.guarantee),
        limit=quota.limit,
        weight=quota.weight,
        usage=TeamUsageView(gpus=used.gpus, by_model=used.by_model),
        pending=used.pending,
        admins=admins or [],
        storage=storage_view(team),
    )


def storage_view(team: TeamModel) -> TeamStorageView:
    """The team's storage quota and what its files took at the last scan."""
    used, quota = team.storage_used, team.storage_quota
    return TeamStorageView(
        quota=quota,
        used=used,
        scanned_at=team.storage_scanned_at,
        over=quota is not None and used is not None and used > quota,
    )
