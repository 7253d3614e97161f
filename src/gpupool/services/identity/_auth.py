"""API tokens, web sessions, sign-in, and the first admin of a new pool."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

import gpupool.services.identity._quotas as quotas
import gpupool.services.identity._users as users
from gpupool.domain.jobs import Role
from gpupool.errors import NotFound, StorageFull, Unauthenticated
from gpupool.services.core import Principal
from gpupool.services.identity._passwords import (
    DUMMY_HASH,
    new_secret,
    secret_hash,
    verify_password,
)
from gpupool.services.identity._web_sessions import end_token_sessions
from gpupool.store.db import Database
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
    quotas.create_team(session, users.DEFAULT_TEAM, quotas.Quota(), (), now)
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
    end_token_sessions(session, token.id)
    return token


def principal_from_token(session: Session, secret: str, now: float) -> Principal:
    return check_token(session, secret, now)[0]


def check_token(session: Session, secret: str, now: float) -> tuple[Principal, TokenModel]:
    token = session.scalar(select(TokenModel).where(TokenModel.token_hash == secret_hash(secret)))
    if token is None or token.revoked_at or (token.expires_at and token.expires_at < now):
        raise Unauthenticated("the token is unknown, revoked or expired: ask an admin for one")
    return _principal(session.get(UserModel, token.user_id)), token


@dataclass
class _Seen:
    principal: Principal
    expires_at: float | None
    checked_at: float


class TokenCache:
    """Who recently seen API tokens belong to, so that a request costs no database read.

    Changes to users and tokens made through this server clear it at once; ``ttl`` bounds how
    long a change made elsewhere (another server on the same database) can go unseen. The
    token's last use is written at most once per ``ttl``.
    """

    def __init__(self, ttl: float = 10.0) -> None:
        self.ttl = ttl
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def known(self, secret: str, now: float) -> Principal | None:
        """The principal of a token seen recently, or None (then call ``principal``)."""
        seen = self._seen.get(secret_hash(secret))
        if seen and now - seen.checked_at < self.ttl and not _expired(seen.expires_at, now):
            return seen.principal
        return None

    def principal(self, db: Database, secret: str, now: float) -> Principal:
        key = secret_hash(secret)
        if known := self.known(secret, now):
            return known
        try:
            with db.session() as session:
                who, token = check_token(session, secret, now)
                token.last_used_at = now
        except StorageFull:  # a full disk must not refuse a valid token: its last use waits
            with db.reader() as session:
                who, token = check_token(session, secret, now)
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen.clear()
            self._seen[key] = _Seen(who, token.expires_at, now)
        return who

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


def _expired(expires_at: float | None, now: float) -> bool:
    return expires_at is not None and expires_at < now


def sign_in(
    session: Session, name: str, password: str, now: float, hours: float
) -> tuple[str, WebSessionModel]:
    """Check a password (or an API token given as the password) and open a web session.

    A session opened with a token ends with it (revoked or expired)."""
    user = session.scalar(select(UserModel).where(UserModel.name == name))
    token = _check_credentials(session, user, password, now)
    expires_at = now + hours * 3600
    if token is not None and token.expires_at is not None:
        expires_at = min(expires_at, token.expires_at)
    secret = secrets.token_urlsafe(32)
    web = WebSessionModel(
        id_hash=secret_hash(secret),
        user_id=user.id,
        token_id=token.id if token else None,
        csrf_token=secrets.token_urlsafe(24),
        created_at=now,
        expires_at=expires_at,
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


def _check_credentials(
    session: Session, user: UserModel | None, password: str, now: float
) -> TokenModel | None:
    """None for the user's password, the token for one of its API tokens; else
    Unauthenticated. An unknown or disabled user is refused only after a password check as
    slow as a real one, so that timing does not tell which names exist."""
    usable = user is not None and not user.disabled
    if _password_ok(user.password_hash if usable else None, password):
        return None
    token = _own_token(session, user, password, now) if usable else None
    if token is None:
        raise Unauthenticated("wrong user name or password (or token)")
    return token


def _password_ok(stored: str | None, password: str) -> bool:
    """Always one scrypt check, against a dummy hash when there is no password to check."""
    matches = verify_password(password, stored or DUMMY_HASH)
    return matches and stored is not None


def _own_token(session: Session, user: UserModel, password: str, now: float) -> TokenModel | None:
    """The user's live API token given as the password, if it is one."""
    if not password.startswith(TOKEN_PREFIX + "_"):
        return None
    try:
        who, token = check_token(session, password, now)
    except Unauthenticated:
        return None
    return token if who.user_id == user.id else None


def principal_of(session: Session, user_id: int) -> Principal:
    """The user as a principal, as of now (work the server does on their behalf: an
    experiment's trials); Unauthenticated when they are disabled or gone."""
    return _principal(session.get(UserModel, user_id))


def _principal(user: UserModel | None, via_session: bool = False) -> Principal:
    if user is None or user.disabled:
        raise Unauthenticated("this user is disabled or gone: ask an admin")
    return Principal(
        user_id=user.id,
        name=user.name,
        role=Role(user.role),
        team_ids=frozenset(team.id for team in user.teams),
        via_session=via_session,
        admin_team_ids=frozenset(team.id for team in user.admin_of),
    )
