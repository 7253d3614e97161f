"""Web sign-in (cookie + CSRF token), sign-out, whoami, health."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

import gpupool
from gpupool.api.deps import SESSION_COOKIE, PlatformDep, PrincipalDep, client_address
from gpupool.api.schemas import LoginIn, WhoAmI
from gpupool.services import auth
from gpupool.store.models import UserModel

router = APIRouter(tags=["session"])


@router.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok", "version": gpupool.__version__}


@router.post("/session", response_model=WhoAmI)
def sign_in(body: LoginIn, request: Request, response: Response, ctx: PlatformDep) -> WhoAmI:
    """Open a web session; failed sign-ins are throttled per user name and per address."""
    hours, now = ctx.settings.session_hours, ctx.clock.now()
    guard = ctx.throttle.guard(client_address(request), body.user)
    with guard, ctx.db.session() as session:
        secret, web = auth.sign_in(session, body.user, body.password, now, hours)
        user = session.get(UserModel, web.user_id)
        out = WhoAmI(
            user=user.name,
            role=user.role,
            teams=sorted(t.name for t in user.teams),
            csrf_token=web.csrf_token,
        )
        lifetime = web.expires_at - now
    set_session_cookie(response, secret, lifetime, ctx.settings.secure_cookies)
    return out


@router.delete("/session", status_code=204)
def sign_out(request: Request, response: Response, ctx: PlatformDep, _who: PrincipalDep) -> None:
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        with ctx.db.session() as session:
            auth.sign_out(session, cookie)
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


@router.get("/whoami", response_model=WhoAmI)
def whoami(ctx: PlatformDep, who: PrincipalDep) -> WhoAmI:
    with ctx.db.reader() as session:
        user = session.get(UserModel, who.user_id)
        teams = sorted(t.name for t in user.teams)
    return WhoAmI(user=who.name, role=who.role, teams=teams)
