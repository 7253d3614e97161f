"""Request dependencies: the platform context and who is asking (token, or cookie + CSRF)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from starlette.concurrency import run_in_threadpool

from gpupool.errors import CsrfFailed, Unauthenticated
from gpupool.services import auth
from gpupool.services.access import Principal
from gpupool.services.platform import Platform

SESSION_COOKIE = "gpupool_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def platform(request: Request) -> Platform:
    return request.app.state.platform


PlatformDep = Annotated[Platform, Depends(platform)]


async def principal(request: Request, ctx: PlatformDep) -> Principal:
    """Bearer token first; else the session cookie, with the CSRF check on unsafe methods.

    Async, so that a token already known costs no thread hop; database reads go to a thread.
    While the client's address is throttled (too many unknown tokens or failed sign-ins), every
    token is refused with a 429.
    """
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        secret, now = header[7:].strip(), ctx.clock.now()
        with ctx.throttle.guard(client_address(request)):  # unknown tokens count as failures
            known = ctx.tokens.known(secret, now)
            return known or await run_in_threadpool(ctx.tokens.principal, ctx.db, secret, now)
    return await run_in_threadpool(_from_cookie, request, ctx)


def client_address(request: Request) -> str:
    """The address the connection came from; never X-Forwarded-For, which clients write."""
    return request.client.host if request.client else "unknown"


def _from_cookie(request: Request, ctx: Platform) -> Principal:
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


PrincipalDep = Annotated[Principal, Depends(principal)]

MAX_ID = 2**31 - 1
MAX_OFFSET = 2**53
Id = Annotated[int, Path(ge=1, le=MAX_ID, description="a numeric id")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
