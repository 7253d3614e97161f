"""Web sign-in (cookie + CSRF token), sign-out, whoami, health."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response

from gpupool.api.access import Rule, allow, declare
from gpupool.api.deps import PlatformDep, client_address, session_cookie_name, session_secret
from gpupool.api.schemas import LoginIn
from gpupool.domain.views import HealthView, WhoAmIView
from gpupool.services import cluster, identity
from gpupool.services.core import Principal

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
    (``services.identity``: unknown tokens sent elsewhere hold back no password)."""
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
    identity.sign_out(ctx, session_secret(request))
    set_session_cookie(response, None, 0, ctx.settings.secure_cookies)


def set_session_cookie(
    response: Response, secret: str | None, seconds: float, secure: bool
) -> None:
    """Set (or, with None, delete) the session cookie: never readable by scripts, never sent
    by another site's page, for every path of this host and no other host; over HTTPS only,
    as a ``__Host-`` cookie, when users reach the server by https (``session_cookie_name``).
    ``Priority=High``: a browser whose jar for this host is full drops other cookies first
    (a workload's, which the proxy passes on without a Priority of their own)."""
    value = f"{secret}; Max-Age={int(seconds)}" if secret is not None else '""; Max-Age=0'
    attributes = "; Path=/; HttpOnly; SameSite=Strict; Priority=High"
    cookie = f"{session_cookie_name(secure)}={value}{attributes}"
    response.raw_headers.append((b"set-cookie", (cookie + ("; Secure" if secure else "")).encode()))


@router.get("/whoami", response_model=WhoAmIView)
def whoami(ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)]) -> WhoAmIView:
    return identity.whoami(ctx, who)
