"""Who may reach a workload through the proxy: the caller of a proxied request or WebSocket.

The routers of /notebooks and /serve share this: they take the caller (an API token in
``Authorization: Bearer``, else the platform's session cookie), ask their service for the
workload as that caller may see it (NotFound when it is not theirs), then call the proxy.
A refusal is answered by ``refusal`` (HTTP) or ``proxy.refuse_websocket``:

    try:
        who = await proxy_caller(request)
        target = await run_in_threadpool(service.target_of, ctx, who, ...)
    except GpupoolError as error:
        return refusal(request, error)
    return await proxy_of(request).http(request, target, headers)

A proxied page cannot carry the platform's CSRF header (the workload's own script makes its
requests), so a cookie's request that changes something, and every WebSocket opened with a
cookie, must come from a page of this server (its ``Origin``); with ``SameSite=Strict`` on
the cookie, that keeps other sites out.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from gpupool.api.deps import SAFE_METHODS, session_secret, token_caller
from gpupool.errors import CsrfFailed, GpupoolError, TooManyAttempts, error_body
from gpupool.services import identity
from gpupool.services.core import Principal
from gpupool.services.platform import Platform

CROSS_SITE = CsrfFailed(
    "a request through the proxy that changes something, or opens a WebSocket, with the "
    "platform's sign-in cookie must come from a page of this server: open the page on this "
    "server, or send an API token (Authorization: Bearer) instead"
)


async def proxy_caller(connection: HTTPConnection) -> Principal:
    """The caller of a proxied request or WebSocket: an API token first, else the session
    cookie. Unauthenticated (401) without either, or with one unknown or expired;
    CsrfFailed (403) for a cookie's change or WebSocket from another origin; TooManyAttempts
    (429) for an unknown token from an address that sent too many (a valid one is let in)."""
    ctx: Platform = connection.app.state.platform
    secret = bearer_secret(connection)
    if secret is not None:
        known = identity.recent_token(ctx, secret)
        if known is None:
            known = await run_in_threadpool(
                token_caller,
                ctx,
                secret,
                connection,  # type: ignore[arg-type]  # any connection
            )
        return known
    cookie = session_secret(connection)
    who = await run_in_threadpool(identity.by_session, ctx, cookie, None, False)
    if _changes(connection) and not same_origin(connection):
        raise CROSS_SITE
    return who


def bearer_secret(connection: HTTPConnection) -> str | None:
    """The secret of ``Authorization: Bearer <secret>``, or None (a router with keys of its
    own, such as a deployment's, looks at it first)."""
    header = connection.headers.get("authorization", "")
    if not header.lower().startswith("bearer "):
        return None
    return header[7:].strip()


def same_origin(connection: HTTPConnection) -> bool:
    """The request comes from a page of this server: its ``Origin`` names the host it was
    sent to, and the browser does not call it cross-site."""
    origin, host = connection.headers.get("origin"), connection.headers.get("host", "")
    if not origin or not host:
        return False
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    site = connection.headers.get("sec-fetch-site", "same-origin")
    return netloc.lower() == host.lower() and site in ("same-origin", "none")


def refusal(connection: HTTPConnection, error: GpupoolError) -> Response:
    """The answer to a refused proxied request: a browser opening a page without signing in
    goes to the sign-in page (and back here after it); everyone else gets the error (401,
    403, 404, 429) as JSON."""
    if error.status == 401 and _page_visit(connection):
        url = connection.url
        target = url.path + (f"?{url.query}" if url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)
    headers = {}
    if error.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(error, TooManyAttempts):
        headers["Retry-After"] = str(error.retry_after)
    body = error_body(error.code, error.message, error.details)
    return JSONResponse(body, status_code=error.status, headers=headers)


def _changes(connection: HTTPConnection) -> bool:
    if connection.scope["type"] == "websocket":
        return True
    return connection.scope.get("method", "GET") not in SAFE_METHODS


def _page_visit(connection: HTTPConnection) -> bool:
    """A browser navigating to a page (not a script's request, not a WebSocket)."""
    if connection.scope["type"] != "http" or connection.scope.get("method") != "GET":
        return False
    return "text/html" in connection.headers.get("accept", "")
