"""Users, teams and memberships."""

from __future__ import annotations

import enum
import math
import re
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import Role
from gpupool.errors import (
    Conflict,
    InvalidRequest,
    InvalidWeight,
    NotFound,
    UnixUserNotAllowed,
    UnknownTeam,
)
from gpupool.executors import accounts
from gpupool.services.passwords import hash_password
from gpupool.store.models import MembershipModel, TeamModel, UserModel

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
DEFAULT_TEAM = "default"
MIN_PASSWORD = 8
MAX_WEIGHT = 1_000_000.0
DEFAULT_WEIGHT = 1.0


class Keep(enum.Enum):
    """An argument left out of an update: the field keeps its value (None would clear it)."""

    KEEP = "keep"


KEEP = Keep.KEEP


def check_name(kind: str, name: str) -> str:
    if not NAME.match(name):
        raise InvalidRequest(
            f"'{name}' is not a valid {kind} name: use 1-63 lower-case letters, digits, '.', "
            "'_' or '-', starting with a letter or digit"
        )
    return name


def create_team(session: Session, name: str, now: float) -> TeamModel:
    check_name("team", name)
    if session.scalar(select(TeamModel).where(TeamModel.name == name)):
        raise Conflict(f"team '{name}' already exists")
    team = TeamModel(name=name, created_at=now)
    session.add(team)
    session.flush()
    return team


def get_team(session: Session, name: str) -> TeamModel:
    team = session.scalar(select(TeamModel).where(TeamModel.name == name))
    if team is None:
        raise UnknownTeam(f"no team named '{name}': list teams with 'gpupool teams'")
    return team


def list_teams(session: Session) -> list[TeamModel]:
    return list(session.scalars(select(TeamModel).order_by(TeamModel.name)))


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


def list_users(session: Session) -> list[UserModel]:
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
    """Change what is given; ``unix_user`` None clears the mapping, KEEP leaves it."""
    user = get_user(session, name)
    if unix_user is not KEEP:
        user.unix_user = check_unix_user(unix_user)
    if weight is not None:
        user.weight = check_weight(weight)
    if role is not None:
        user.role = role.value
    if teams is not None:
        user.teams = [get_team(session, team) for team in teams]
    if password is not None:
        user.password_hash = _password_hash(password)
    if disabled is not None:
        user.disabled = disabled
    session.flush()
    return user


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
