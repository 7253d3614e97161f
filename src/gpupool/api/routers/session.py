"""Web sign-in (cookie + CSRF token), sign-out, whoami, health."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response

from gpupool.api.access import Rule, allow, declare
from gpupool.api.deps import SESSION_COOKIE, PlatformDep, client_address
from gpupool.api.schemas import LoginIn
from gpupool.domain.views import HealthView, WhoAmIView
from gpupool.services import cluster, identity
from gpupool.services.access import Principal

router = APIRouter(tags=["session"])


@router.get("/health", response_model=HealthView, response_model_exclude_none=True)
@declare(Rule.PUBLIC)
def health(ctx: PlatformDep) -> HealthView:
    """The server answers; in Ray mode, "cluster" says whether its Ray cluster does."""
    return cluster.health(ctx)


@router.post("/session", response_model=WhoAmIView)
@declare(Rule.PUBLIC)
def sign_in(body: LoginIn, request: Request, response: Response, ctx: PlatformDep) -> WhoAmIView:
    """Open a web session; failed sign-ins are throttled per user name and per address
    (``services.throttle``: unknown tokens sent elsewhere hold back no password)."""
    opened = identity.sign_in(ctx, body.user, body.password, client_address(request))
    set_session_cookie(response, opened.secret, opened.seconds, ctx.settings.secure_cookies)
    return opened.who


@router.delete("/session", status_code=204)
def sign_out(
    request: Request,
    response: Response,
    ctx: PlatformDep,
    _who: Annotated[Principal, allow(Rule.SIGNED_IN)],
) -> None:
    identity.sign_out(ctx, request.cookies.get(SESSION_COOKIE))
    set_session_cookie(response, None, 0, ctx.settings.secure_cookies)


def set_session_cookie(
    response: Response, secret: str | None, seconds: float, secure: bool
) -> None:
    """Set (or, with None, delete) the session cookie: never readable by scripts, never sent
    by another site's page, and over HTTPS only when users reach the server by https."""
    if secret is None:
        response.delete_cookie(SESSION_COOKIE, secure=secure, httponly=True, samesite="strict")
        return
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=int(seconds),
        secure=secure,
        httponly=True,
        samesite="strict",
    )


@router.get("/whoami", response_model=WhoAmIView)
def whoami(ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)]) -> WhoAmIView:
    return identity.whoami(ctx, who)
