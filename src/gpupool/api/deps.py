"""Request dependencies: the platform context and who is asking (token, or cookie + CSRF)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request

from gpupool.errors import CsrfFailed, Unauthenticated
from gpupool.services import auth
from gpupool.services.access import Principal
from gpupool.services.platform import Platform

SESSION_COOKIE = "gpupool_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def platform(request: Request) -> Platform:
    return request.app.state.platform


PlatformDep = Annotated[Platform, Depends(platform)]


def principal(request: Request, ctx: PlatformDep) -> Principal:
    """Bearer token first; else the session cookie, with the CSRF check on unsafe methods."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return _from_token(ctx, header[7:].strip())
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise Unauthenticated()
    with ctx.db.reader() as session:
        who, web = auth.principal_from_session(session, cookie, ctx.clock.now())
    if request.method not in SAFE_METHODS and request.headers.get(CSRF_HEADER) != web.csrf_token:
        raise CsrfFailed()
    return who


def optional_session(request: Request, ctx: PlatformDep) -> tuple[Principal, str] | None:
    """For web pages: the signed-in user and the page's CSRF token, or None."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return None
    try:
        with ctx.db.reader() as session:
            who, web = auth.principal_from_session(session, cookie, ctx.clock.now())
    except Unauthenticated:
        return None
    return who, web.csrf_token


def _from_token(ctx: Platform, secret: str) -> Principal:
    now = ctx.clock.now()
    with ctx.db.reader() as session:
        who = auth.principal_from_token(session, secret, now)
        stale = auth.token_needs_touch(session, secret, now)
    if stale:
        with ctx.db.session() as session:
            auth.touch_token(session, secret, now)
    return who


PrincipalDep = Annotated[Principal, Depends(principal)]

MAX_ID = 2**31 - 1
MAX_OFFSET = 2**53
Id = Annotated[int, Path(ge=1, le=MAX_ID, description="a numeric id")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
