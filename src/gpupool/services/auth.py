"""API tokens, web sessions, sign-in, and the first admin of a new pool."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import Role
from gpupool.errors import NotFound, Unauthenticated
from gpupool.services import users
from gpupool.services.access import Principal
from gpupool.services.passwords import new_secret, secret_hash, verify_password
from gpupool.store.models import TokenModel, UserModel, WebSessionModel

TOKEN_PREFIX = "gpt"
ADMIN = "admin"


@dataclass(frozen=True)
class Bootstrap:
    """What the first start prints once: the admin's one-time token."""

    user: str
    token: str


def bootstrap(session: Session, now: float) -> Bootstrap | None:
    """Create the default team and the admin user with a fresh token, once per database."""
    if session.scalar(select(UserModel.id).limit(1)) is not None:
        return None
    users.create_team(session, users.DEFAULT_TEAM, now)
    admin = users.create_user(session, ADMIN, Role.ADMIN, [users.DEFAULT_TEAM], now)
    token, _ = create_token(session, admin, "first-start", now)
    return Bootstrap(user=admin.name, token=token)


def create_token(
    session: Session, user: UserModel, name: str, now: float, expires_at: float | None = None
) -> tuple[str, TokenModel]:
    secret = new_secret(TOKEN_PREFIX)
    token = TokenModel(
        user_id=user.id,
        name=name[:100] or "token",
        token_hash=secret_hash(secret),
        prefix=secret[:10],
        created_at=now,
        expires_at=expires_at,
    )
    session.add(token)
    session.flush()
    return secret, token


def list_tokens(session: Session, user_id: int | None = None) -> list[TokenModel]:
    query = select(TokenModel).order_by(TokenModel.id)
    if user_id is not None:
        query = query.where(TokenModel.user_id == user_id)
    return list(session.scalars(query))


def revoke_token(session: Session, token_id: int, principal: Principal, now: float) -> TokenModel:
    token = session.get(TokenModel, token_id)
    if token is None or not (principal.is_admin or token.user_id == principal.user_id):
        raise NotFound(f"no token {token_id}: list tokens with 'gpupool tokens'")
    token.revoked_at = token.revoked_at or now
    return token


def principal_from_token(session: Session, secret: str, now: float) -> Principal:
    token = session.scalar(select(TokenModel).where(TokenModel.token_hash == secret_hash(secret)))
    if token is None or token.revoked_at or (token.expires_at and token.expires_at < now):
        raise Unauthenticated("the token is unknown, revoked or expired: ask an admin for one")
    return _principal(session.get(UserModel, token.user_id))


def token_needs_touch(session: Session, secret: str, now: float) -> bool:
    """Whether last_used_at is stale; it is written at most once a minute to keep reads cheap."""
    used = session.scalar(
        select(TokenModel.last_used_at).where(TokenModel.token_hash == secret_hash(secret))
    )
    return used is None or now - used > 60


def touch_token(session: Session, secret: str, now: float) -> None:
    token = session.scalar(select(TokenModel).where(TokenModel.token_hash == secret_hash(secret)))
    if token is not None:
        token.last_used_at = now


def sign_in(
    session: Session, name: str, password: str, now: float, hours: float
) -> tuple[str, WebSessionModel]:
    """Check a password (or an API token given as the password) and open a web session."""
    user = session.scalar(select(UserModel).where(UserModel.name == name))
    if user is None or user.disabled or not _password_or_token_ok(session, user, password, now):
        raise Unauthenticated("wrong user name or password (or token)")
    secret = secrets.token_urlsafe(32)
    web = WebSessionModel(
        id_hash=secret_hash(secret),
        user_id=user.id,
        csrf_token=secrets.token_urlsafe(24),
        created_at=now,
        expires_at=now + hours * 3600,
    )
    session.add(web)
    return secret, web


def principal_from_session(
    session: Session, secret: str, now: float
) -> tuple[Principal, WebSessionModel]:
    web = session.get(WebSessionModel, secret_hash(secret))
    if web is None or web.expires_at < now:
        raise Unauthenticated("your session ended: sign in again")
    return _principal(session.get(UserModel, web.user_id), via_session=True), web


def sign_out(session: Session, secret: str) -> None:
    web = session.get(WebSessionModel, secret_hash(secret))
    if web is not None:
        session.delete(web)


def _password_or_token_ok(session: Session, user: UserModel, password: str, now: float) -> bool:
    if verify_password(password, user.password_hash):
        return True
    if not password.startswith(TOKEN_PREFIX + "_"):
        return False
    try:
        return principal_from_token(session, password, now).user_id == user.id
    except Unauthenticated:
        return False


def _principal(user: UserModel | None, via_session: bool = False) -> Principal:
    if user is None or user.disabled:
        raise Unauthenticated("this user is disabled or gone: ask an admin")
    return Principal(
        user_id=user.id,
        name=user.name,
        role=Role(user.role),
        team_ids=frozenset(team.id for team in user.teams),
        via_session=via_session,
    )
