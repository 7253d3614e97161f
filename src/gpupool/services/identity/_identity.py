"""Who is asking, as the API meets callers: an API token, or a web session (cookie and CSRF
token); signing in and out of web sessions; who one is. ``_auth`` checks the
credentials themselves; the throttle (``_throttle``) refuses a password from an address
or for a name that failed too often, and never a valid token: only unknown ones are counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import gpupool.services.identity._auth as auth
from gpupool.domain.views import WhoAmIView
from gpupool.errors import CsrfFailed, NotFound, Unauthenticated
from gpupool.services.core import Principal, Reads, Writes
from gpupool.services.identity._ports import RecentTokens, SignIns, TokenChecks
from gpupool.services.identity._views import who_am_i
from gpupool.store.models import JobModel, UserModel


@dataclass(frozen=True)
class WebSignIn:
    """A web session just opened: its secret (the cookie's value, never stored), how many
    seconds it lasts, and the user as it sees itself (with the session's CSRF token)."""

    secret: str
    seconds: float
    who: WhoAmIView


def recent_token(ctx: RecentTokens, secret: str) -> Principal | None:
    """The caller of an API token seen lately, without a database read (None: not seen
    lately, ask ``by_token``); never refused, whatever its address did."""
    return ctx.tokens.known(secret, ctx.clock.now())


def by_token(ctx: TokenChecks, secret: str, address: str) -> Principal:
    """The caller of an API token; Unauthenticated (counted against ``address``) for a token
    unknown, revoked or expired, or TooManyAttempts once ``address`` sent too many of those.
    A valid token is let in whatever its address did."""
    with ctx.throttle.guard(address):
        return ctx.tokens.principal(ctx.db, secret, ctx.clock.now())


def by_session(ctx: Writes, cookie: str | None, csrf: str | None, changes: bool) -> Principal:
    """The caller of a web session; a request that ``changes`` something must also carry the
    session's CSRF token (else CsrfFailed)."""
    if not cookie:
        raise Unauthenticated()
    with ctx.db.reader() as session:
        who, web = auth.principal_from_session(session, cookie, ctx.clock.now())
    if changes and csrf != web.csrf_token:
        raise CsrfFailed()
    return who


def page_session(ctx: Writes, cookie: str | None) -> tuple[Principal, str] | None:
    """For web pages: the signed-in user and its session's CSRF token, or None."""
    if not cookie:
        return None
    try:
        with ctx.db.reader() as session:
            who, web = auth.principal_from_session(session, cookie, ctx.clock.now())
    except Unauthenticated:
        return None
    return who, web.csrf_token


def job_source(ctx: Reads, job_id: int) -> str:
    """How the throttle (and its log) names a caller that is a job: "job 12 (ann)", its
    owner's name, so that an admin reading the log knows whom to ask."""
    with ctx.db.reader() as session:
        job = session.get(JobModel, job_id)
        return f"job {job_id}" if job is None else f"job {job_id} ({job.user.name})"


def sign_in(ctx: SignIns, user: str, password: str, address: str) -> WebSignIn:
    """Open a web session with a password (or an API token as the password); failures are
    throttled per user name and per address."""
    now, hours = ctx.clock.now(), ctx.settings.session_hours
    with ctx.throttle.guard(address, user), ctx.db.session() as session:
        secret, web = auth.sign_in(session, user, password, now, hours)
        shown = who_am_i(session.get(UserModel, web.user_id), csrf_token=web.csrf_token)
        return WebSignIn(secret, web.expires_at - now, shown)


def sign_out(ctx: Reads, cookie: str | None) -> None:
    """End the web session of ``cookie``, if there is one."""
    if not cookie:
        return
    with ctx.db.session() as session:
        auth.sign_out(session, cookie)


def whoami(ctx: Reads, who: Principal) -> WhoAmIView:
    with ctx.db.reader() as session:
        user = session.get(UserModel, who.user_id)
        if user is None:
            raise NotFound("your user is gone: ask an admin")
        return who_am_i(user)
