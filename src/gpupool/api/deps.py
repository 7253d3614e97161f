"""Request dependencies: the platform context and who is asking (token, or cookie + CSRF)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from gpupool.api import peers
from gpupool.domain.web import CSRF_HEADER, SESSION_COOKIE
from gpupool.services import identity
from gpupool.services.core import Principal
from gpupool.services.platform import Platform

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# its name where users reach the server over https: a browser takes a __Host- cookie only
# Secure, with Path=/ and no Domain, and from nothing but this origin (docs/security.md)
SECURE_SESSION_COOKIE = "__Host-" + SESSION_COOKIE


async def platform(request: Request) -> Platform:
    return request.app.state.platform


PlatformDep = Annotated[Platform, Depends(platform)]


async def principal(request: Request, ctx: PlatformDep) -> Principal:
    """Bearer token first; else the session cookie, with the CSRF check on unsafe methods.

    Async, so that a token already known costs no thread hop; database reads go to a thread.
    A valid token or session is never refused for what others did; an address that sent too
    many unknown tokens gets 429 (not 401) for its next unknown ones.
    """
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        secret = header[7:].strip()
        known = identity.recent_token(ctx, secret)
        return known or await run_in_threadpool(token_caller, ctx, secret, request)
    cookie, csrf = session_secret(request), request.headers.get(CSRF_HEADER)
    changes = request.method not in SAFE_METHODS
    return await run_in_threadpool(identity.by_session, ctx, cookie, csrf, changes)


def client_address(request: Request) -> str:
    """Where the connection came from, as the throttle counts it: its address (never
    X-Forwarded-For, which clients write) and, for a caller on this machine, the account
    that owns its socket (``api.peers``): a job's failures hold back no other account on
    127.0.0.1. Reads /proc for a local caller: call it in a thread, where a password or
    a token not seen lately is checked."""
    if request.client is None:
        return relayed_source(request)
    server = request.scope.get("server")
    owner = peers.socket_owner(tuple(request.client), server) if server else None
    return request.client.host if owner is None else f"{request.client.host} uid {owner}"


def relayed_source(request: Request) -> str:
    """A caller on the server's Unix socket: a job's runner's bridge, named by its job and
    owner ("job 12 (ann)"), so that one job's failures hold back no other job; "unknown" for
    a caller that is not a job's bridge."""
    pid = request.scope.get("state", {}).get(peers.PEER_PID)
    ctx: Platform = request.app.state.platform
    job_id = peers.bridged_job(pid, ctx.settings.jobs_dir) if pid else None
    return "unknown" if job_id is None else identity.job_source(ctx, job_id)


def token_caller(ctx: Platform, secret: str, request: Request) -> Principal:
    """``identity.by_token`` for the caller of ``request`` (in a thread: it reads the
    database, and /proc for a caller on this machine)."""
    return identity.by_token(ctx, secret, client_address(request))


def optional_session(request: Request, ctx: PlatformDep) -> tuple[Principal, str] | None:
    """For web pages: the signed-in user and the page's CSRF token, or None."""
    return identity.page_session(ctx, session_secret(request))


def session_cookie_name(secure: bool) -> str:
    """The session cookie's name: ``__Host-`` prefixed where users reach the server over
    https (``secure``); the plain name over http, where some browsers (Safari) refuse a
    Secure cookie even from a loopback address."""
    return SECURE_SESSION_COOKIE if secure else SESSION_COOKIE


def session_secret(connection: HTTPConnection) -> str | None:
    """The session cookie's value, under the one name this server sets (never the other)."""
    ctx: Platform = connection.app.state.platform
    return connection.cookies.get(session_cookie_name(ctx.settings.secure_cookies))


MAX_ID = 2**31 - 1
MAX_OFFSET = 2**53
Id = Annotated[int, Path(ge=1, le=MAX_ID, description="a numeric id")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
