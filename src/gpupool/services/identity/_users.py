"""Users, teams and memberships.

The functions that take a port (``core.Reads``, ``core.Tells``, ``_ports.UserChanges``...) are
what the API calls about users: each opens its own transaction, returns read models and says
what changed (the token cache forgets, the control loop reads weights again). Those that take
a ``Session`` are the steps (``_teams`` calls them for teams).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import ColumnElement, delete, func, select, update
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobStatus, Role
from gpupool.domain.views import UserView, WhoAmIView
from gpupool.errors import (
    Conflict,
    DefaultTeamKept,
    Forbidden,
    InvalidRequest,
    InvalidWeight,
    LastAdmin,
    NotFound,
    TeamNotEmpty,
    UnixUserNotAllowed,
    UnknownTeam,
    ViewerNotTeamAdmin,
    WrongPassword,
)
from gpupool.executors import accounts
from gpupool.services.core import Principal, Reads, Tells
from gpupool.services.identity._passwords import hash_password, verify_password
from gpupool.services.identity._ports import PasswordChecks, UserChanges
from gpupool.services.identity._views import user_view, who_am_i
from gpupool.services.identity._web_sessions import end_web_sessions
from gpupool.store.models import JobModel, MembershipModel, TeamModel, UserModel

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
DEFAULT_TEAM = "default"
MIN_PASSWORD = 8
UNFINISHED = (JobStatus.PENDING.value, JobStatus.STARTING.value, JobStatus.RUNNING.value)
MAX_WEIGHT = 1_000_000.0
DEFAULT_WEIGHT = 1.0


class Keep(enum.Enum):
    """An argument left out of an update: the field keeps its value (None would clear it)."""

    KEEP = "keep"


KEEP = Keep.KEEP


# -- what the API calls ------------------------------------------------------------------------


def list_users(ctx: Reads) -> list[UserView]:
    with ctx.db.reader() as session:
        return [user_view(user) for user in user_rows(session)]


def add_user(
    ctx: Tells,
    name: str,
    role: Role,
    teams: list[str],
    password: str | None = None,
    weight: float = DEFAULT_WEIGHT,
    unix_user: str | None = None,
) -> UserView:
    """A new user (see ``create_user``); the scheduler reads its weight at once."""
    with ctx.db.session() as session:
        user = create_user(session, name, role, teams, ctx.clock.now(), password, weight, unix_user)
        shown = user_view(user)
    ctx.loop.weights_changed()
    return shown


def change_user(
    ctx: UserChanges,
    name: str,
    *,
    role: Role | None = None,
    teams: list[str] | None = None,
    password: str | None = None,
    disabled: bool | None = None,
    weight: float | None = None,
    unix_user: str | None | Literal[Keep.KEEP] = KEEP,
) -> UserView:
    """Change what is given (see ``update_user``); its tokens are checked again at once."""
    with ctx.db.session() as session:
        shown = user_view(
            update_user(
                session,
                name,
                role=role,
                teams=teams,
                password=password,
                disabled=disabled,
                weight=weight,
                unix_user=unix_user,
            )
        )
    ctx.tokens.clear()
    if weight is not None:
        ctx.loop.weights_changed()
    return shown


def change_own_password(
    ctx: PasswordChecks, who: Principal, current: str | None, new: str, address: str
) -> WhoAmIView:
    """``who``'s change of its own password (see ``set_own_password``). A wrong current
    password counts as a failed sign-in from ``address``, and is throttled as one."""
    ctx.throttle.check(address, who.name)
    try:
        with ctx.db.session() as session:
            return who_am_i(set_own_password(session, who.user_id, current, new))
    except WrongPassword:
        ctx.throttle.failed(address, who.name)
        raise


# -- the steps, in a caller's transaction ------------------------------------------------------


def check_name(kind: str, name: str) -> str:
    if not NAME.match(name):
        raise InvalidRequest(
            f"'{name}' is not a valid {kind} name: use 1-63 lower-case letters, digits, '.', "
            "'_' or '-', starting with a letter or digit"
        )
    return name


def create_team(session: Session, name: str, now: float) -> TeamModel:
    check_name("team", name)
    if session.scalar(select(TeamModel).where(TeamModel.name == name, not_deleted())):
        raise Conflict(f"team '{name}' already exists")
    team = TeamModel(name=name, created_at=now)
    session.add(team)
    session.flush()
    return team


def get_team(session: Session, name: str, for_update: bool = False) -> TeamModel:
    """The team named ``name`` (not a deleted one); ``for_update``: its row locked."""
    query = select(TeamModel).where(TeamModel.name == name, not_deleted())
    team = session.scalar(query.with_for_update() if for_update else query)
    if team is None:
        raise UnknownTeam(f"no team named '{name}': list teams with 'gpupool teams'")
    return team


def acting_team(session: Session, who: Principal, name: str | None, doing: str) -> TeamModel:
    """The team ``who`` acts for: ``name``, where they may act on it (UnknownTeam else), or
    their only team; InvalidRequest when they have none or several and named none.
    ``doing``: what they do, for the message ("submit to", "make it in")."""
    if name:
        team = get_team(session, name)
        if not who.can_act_on_team(team.id):
            raise UnknownTeam(f"you are not a member of team '{name}': {doing} one of your teams")
        return team
    if len(who.team_ids) == 1:
        team = session.get(TeamModel, next(iter(who.team_ids)))
        if team is not None:
            return team
    mine = [t for t in list_teams(session) if t.id in who.team_ids]
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise InvalidRequest("you belong to no team: ask an admin to add you to one")
    names = ", ".join(t.name for t in mine)
    raise InvalidRequest(f"you belong to several teams ({names}): choose one with --team")


def list_teams(session: Session) -> list[TeamModel]:
    return list(session.scalars(select(TeamModel).where(not_deleted()).order_by(TeamModel.name)))


@dataclass(frozen=True)
class DeletedTeam:
    name: str
    finished_jobs: int  # kept, under the team's row marked deleted


def delete_team(session: Session, name: str, now: float) -> DeletedTeam:
    """Delete a team without pending, starting or running jobs; its members leave it.

    Its finished jobs keep their records and their ids, which a new job must never reuse (a
    runner refuses an attempt it has seen, and SQLite would hand out a deleted row's id
    again): a team with finished jobs keeps its row, marked deleted at ``now`` and without
    quota; nothing lists it or finds it by name, and a new team may take its name. The
    default team stays.
    """
    if name == DEFAULT_TEAM:
        raise DefaultTeamKept()
    team = get_team(session, name, for_update=True)  # a submit to it waits, then fails
    unfinished, finished = _job_counts(session, team.id)
    if unfinished:
        raise TeamNotEmpty(
            f"team '{name}' has {unfinished} pending or running job(s): cancel them "
            f"('gpupool ls --team {name}', then 'gpupool cancel ID...') or let them end, "
            "then delete the team",
            jobs=unfinished,
        )
    session.execute(delete(MembershipModel).where(MembershipModel.team_id == team.id))
    if finished:
        team.deleted_at, team.guarantee, team.gpu_limit = now, {}, None
    else:
        session.delete(team)
    session.flush()
    session.expire_all()  # users loaded before still list the team among theirs
    return DeletedTeam(name, finished)


def _job_counts(session: Session, team_id: int) -> tuple[int, int]:
    """The team's (unfinished, finished) job counts."""
    rows = session.execute(
        select(JobModel.status, func.count())
        .where(JobModel.team_id == team_id)
        .group_by(JobModel.status)
    ).all()
    unfinished = sum(count for status, count in rows if status in UNFINISHED)
    return unfinished, sum(count for _, count in rows) - unfinished


def not_deleted() -> ColumnElement[bool]:
    """The SQL condition of the teams not deleted (see ``delete_team``)."""
    return TeamModel.deleted_at.is_(None)


def create_user(
    session: Session,
    name: str,
    role: Role,
    teams: list[str],
    now: float,
    password: str | None = None,
    weight: float = DEFAULT_WEIGHT,
    unix_user: str | None = None,
) -> UserModel:
    check_name("user", name)
    if session.scalar(select(UserModel).where(UserModel.name == name)):
        raise Conflict(f"user '{name}' already exists")
    user = UserModel(
        name=name, role=role.value, created_at=now, disabled=False, weight=check_weight(weight)
    )
    user.unix_user = check_unix_user(unix_user)
    user.password_hash = _password_hash(password)
    user.teams = [get_team(session, team) for team in teams]
    session.add(user)
    session.flush()
    return user


def get_user(session: Session, name: str) -> UserModel:
    user = session.scalar(select(UserModel).where(UserModel.name == name))
    if user is None:
        raise NotFound(f"no user named '{name}': list users with 'gpupool users'")
    return user


def user_rows(session: Session) -> list[UserModel]:
    return list(session.scalars(select(UserModel).order_by(UserModel.name)))


def update_user(
    session: Session,
    name: str,
    *,
    role: Role | None = None,
    teams: list[str] | None = None,
    password: str | None = None,
    disabled: bool | None = None,
    weight: float | None = None,
    unix_user: str | None | Literal[Keep.KEEP] = KEEP,
) -> UserModel:
    """Change what is given; ``unix_user`` None clears the mapping, KEEP leaves it.

    A new password, or disabling the user, ends the user's web sessions. The last enabled
    admin can be neither disabled nor demoted (LastAdmin)."""
    user = get_user(session, name)
    if disabled or (role is not None and role != Role.ADMIN):
        _keep_an_admin(session, user)
    if unix_user is not KEEP:
        user.unix_user = check_unix_user(unix_user)
    if weight is not None:
        user.weight = check_weight(weight)
    if role is not None:
        user.role = role.value
        if role == Role.VIEWER:  # a viewer cannot be a team admin (set_team_admin)
            _end_team_admin(session, user)
    if teams is not None:
        user.teams = [get_team(session, team) for team in teams]
    if password is not None:
        user.password_hash = _password_hash(password)
    if disabled is not None:
        user.disabled = disabled
    if password is not None or disabled:  # who signed in with the old password must again
        end_web_sessions(session, user.id)
    session.flush()
    session.expire(user, ["admin_of"])  # its memberships may have changed
    return user


def _end_team_admin(session: Session, user: UserModel) -> None:
    session.execute(
        update(MembershipModel).where(MembershipModel.user_id == user.id).values(admin=False)
    )


def _keep_an_admin(session: Session, user: UserModel) -> None:
    """Refuse to leave the pool without an enabled admin (no one could then undo it)."""
    if user.role != Role.ADMIN.value or user.disabled:
        return
    others = select(func.count()).where(
        UserModel.role == Role.ADMIN.value, UserModel.id != user.id, UserModel.disabled.is_(False)
    )
    if not session.scalar(others):
        raise LastAdmin(
            f"{user.name} is the last enabled admin, and the pool needs one: make another user "
            "admin first ('gpupool users set-role NAME admin')"
        )


def check_weight(weight: float) -> float:
    """The weight, if it is a number above 0 and at most ``MAX_WEIGHT``; else InvalidWeight."""
    if isinstance(weight, bool) or not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT:
        raise InvalidWeight(
            f"weight {weight!r} is not allowed: give a number above 0 and at most "
            f"{MAX_WEIGHT:,.0f}, such as 0.5, 1 (the default) or 2; inside a team, a user of "
            "weight 2 is owed twice the GPU time of a user of weight 1",
            fields=[{"field": "weight", "message": "a number above 0"}],
        )
    return float(weight)


def check_unix_user(name: str | None) -> str | None:
    """The account, if this user's jobs may run under it (or None); else UnixUserNotAllowed.

    Several users may share one account, as in Slurm."""
    reason = None if name is None else accounts.problem(name)
    if reason is not None:
        raise UnixUserNotAllowed(reason, fields=[{"field": "unix_user", "message": reason}])
    return name


def user_weights(session: Session) -> dict[str, float]:
    """User name -> fair-share weight, for the users whose weight is not the default."""
    rows = session.execute(
        select(UserModel.name, UserModel.weight).where(UserModel.weight != DEFAULT_WEIGHT)
    )
    return {name: weight for name, weight in rows}


def team_to_manage(session: Session, who: Principal, name: str) -> TeamModel:
    """The team named ``name``, its row locked, if ``who`` may change its members: a pool
    admin, or a team admin of it. A team ``who`` cannot see is NotFound, as one that does
    not exist (for a pool admin, that is UnknownTeam); a member of it gets Forbidden."""
    if who.is_admin:
        return get_team(session, name, for_update=True)
    query = select(TeamModel).where(TeamModel.name == name, not_deleted())
    team = session.scalar(query.with_for_update())
    if team is None or not who.can_see_team(team.id):
        raise NotFound(f"no team named '{name}' that you can see: see 'gpupool whoami'")
    if not who.can_admin_team(team.id):
        raise Forbidden(
            f"only an admin of team {name} or of the pool can change its members: ask one "
            f"(team admins: {', '.join(team_admins(session, [team.id])[team.id]) or 'none'})"
        )
    return team


def join_team(
    session: Session, team: TeamModel, user_name: str, admin: bool | None = None
) -> UserModel:
    """Make the user a member of the team (nothing changes if it is one already); ``admin``
    makes it a team admin of it, or not (None: as it was; a new member is not one)."""
    user = get_user(session, user_name)
    add_member(session, user, team)
    if admin is not None:
        set_team_admin(session, user, team, admin)
    return user


def leave_team(session: Session, team: TeamModel, user_name: str) -> UserModel:
    """End the user's membership of the team; its jobs there stay in the team."""
    user = get_user(session, user_name)
    if team not in user.teams:
        raise NotFound(f"{user_name} is not a member of team {team.name}: see 'gpupool team'")
    user.teams.remove(team)
    session.flush()
    session.refresh(user)  # the teams it is a team admin of, too
    return user


def set_team_admin(session: Session, user: UserModel, team: TeamModel, admin: bool) -> None:
    """Make a member of the team one of its team admins, or not; a viewer cannot be one."""
    if admin and user.role == Role.VIEWER.value:
        raise ViewerNotTeamAdmin(
            f"{user.name} is a viewer, and a viewer cannot be a team admin: give it the "
            f"member role first ('gpupool users set-role {user.name} member')"
        )
    session.execute(
        update(MembershipModel)
        .where(MembershipModel.user_id == user.id, MembershipModel.team_id == team.id)
        .values(admin=admin)
    )
    session.flush()
    session.refresh(user)


def team_admins(session: Session, team_ids: list[int]) -> dict[int, list[str]]:
    """Team id -> the names of its team admins, sorted (every id given is a key)."""
    found: dict[int, list[str]] = {team_id: [] for team_id in team_ids}
    rows = session.execute(
        select(MembershipModel.team_id, UserModel.name)
        .join(UserModel, UserModel.id == MembershipModel.user_id)
        .where(MembershipModel.admin, MembershipModel.team_id.in_(team_ids or [-1]))
        .order_by(UserModel.name)
    )
    for team_id, name in rows:
        found[team_id].append(name)
    return found


def set_own_password(session: Session, user_id: int, current: str | None, new: str) -> UserModel:
    """A user's change of its own password: ``current`` must be right if it has one."""
    user = session.get(UserModel, user_id)
    if user is None:
        raise NotFound("your user is gone: ask an admin")
    if user.password_hash is not None and not verify_password(current or "", user.password_hash):
        raise WrongPassword(
            "the current password is wrong: type it again, or ask an admin to set a new one "
            f"with 'gpupool users set-password {user.name}'"
        )
    return update_user(session, user.name, password=new)


def add_member(session: Session, user: UserModel, team: TeamModel) -> None:
    if team not in user.teams:
        session.add(MembershipModel(user_id=user.id, team_id=team.id))
        session.flush()
        session.refresh(user)


def _password_hash(password: str | None) -> str | None:
    if password is None:
        return None
    if len(password) < MIN_PASSWORD:
        raise InvalidRequest(f"a password needs at least {MIN_PASSWORD} characters")
    return hash_password(password)
