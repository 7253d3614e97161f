"""``/serve/NAME/...``: a deployment's address, round-robin over its ready replicas.

Who may call (``services.deployments``): the members of its team and admins, with the
platform's session cookie or an API token (``Authorization: Bearer``), and the holders of one
of its keys (``Authorization: Bearer gpd_...``). Anyone else gets 404 (a viewer of its team:
403); without credentials, 401. No ready replica: 503 no_healthy_replica, with Retry-After.
Neither the key, the token nor the cookie reaches the replica (``proxy._forwarding``); the
replica's own token (``X-Gpupool-Replica-Token``) is added after every client-sent
``X-Gpupool-*`` header was dropped, so that it can refuse any other caller of its node.

Every answer carries ``Content-Security-Policy: sandbox``: a replica's HTML never runs as a
page of the platform's origin; and no ``Set-Cookie`` of a replica's reaches the client (a
deployment is an API: its cookies would be stored on the platform's origin).

The body is read whole before it is sent (a replica's request is small: the server's body
limit holds), so that a replica that refuses the connection — it just died, or is being
replaced — is skipped and the request sent to the next one. The proxy reaches replicas with
a client of its own (``proxy._upstream``), and passes a small answer on whole: what /serve adds
to a request is measured by benchmarks/proxy_overhead.py.
"""

from __future__ import annotations

import time
from urllib.parse import unquote

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from starlette.requests import HTTPConnection

from gpupool.api.access import Rule, declare
from gpupool.api.proxied import bearer_secret, proxy_caller, refusal
from gpupool.errors import GpupoolError, NoHealthyReplica, NotFound, UpstreamRefused, error_body
from gpupool.proxy import (
    PROXIED_METHODS,
    Kind,
    NoRoute,
    ProxyAnswer,
    Route,
    proxy_of,
    refuse_websocket,
)
from gpupool.services import deployments
from gpupool.services.platform import Platform

router = APIRouter(include_in_schema=False)
PREFIX = "/serve"
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
CONFINED = (("Content-Security-Policy", "sandbox"), ("X-Content-Type-Options", "nosniff"))


@router.api_route(PREFIX + "/{name}/{path:path}", methods=PROXIED_METHODS)
@declare(Rule.TEAM_WRITE)
async def serve(name: str, path: str, request: Request) -> Response:
    """Forward the request to a ready replica of deployment ``name``."""
    began = time.perf_counter()
    ctx: Platform = request.app.state.platform  # not a dependency: FastAPI's solving costs
    try:
        upstream_path = _upstream_path(request, name)
        route = await _route(ctx, request, name)
    except NoHealthyReplica as error:
        return _confined(_unavailable(error))
    except GpupoolError as error:
        return _confined(refusal(request, error))
    await request.body()  # kept: a retry on another replica sends it again
    response, replica_id = await _forward(ctx, request, route, upstream_path)
    failed = response.status_code >= 500
    seconds = time.perf_counter() - began
    ctx.deployments.traffic.record(route.id, replica_id, seconds, failed)
    return _confined(response)


@router.websocket(PREFIX + "/{name}/{path:path}")
async def serve_websocket(websocket: WebSocket, name: str, path: str) -> None:
    """A WebSocket to a ready replica (who may open one: as for HTTP)."""
    ctx: Platform = websocket.app.state.platform
    try:
        upstream_path = _upstream_path(websocket, name)
        route = await _route(ctx, websocket, name)
    except GpupoolError as error:
        await refuse_websocket(websocket, error)
        return
    picked = ctx.routes.pick(route, set())
    if picked is None:
        await refuse_websocket(websocket, NoHealthyReplica())
        return
    target = "ws" + picked.endpoint.url.removeprefix("http") + upstream_path
    await proxy_of(websocket).websocket(websocket, target, picked.headers, via=picked.endpoint.via)


async def _route(ctx: Platform, connection: HTTPConnection, name: str) -> Route:
    """The deployment's route, once its caller is let in (a key first: checking it as an
    API token would count it against the caller's address as an unknown token). One call
    to the proxy's table: no database."""
    secret = bearer_secret(connection)
    if secret is not None and deployments.is_key(secret):
        caller = deployments.key_holder(secret)
    else:
        caller = await proxy_caller(connection)
    try:
        return ctx.routes.route(Kind.DEPLOYMENT, name, caller)
    except NoRoute:
        raise deployments.unknown(name) from None


async def _forward(
    ctx: Platform, request: Request, route: Route, path: str
) -> tuple[Response, int | None]:
    """The first answer of a replica that took the connection, trying each ready one at
    most once; the last refusal when none did."""
    tried: set[int] = set()
    answer: Response = _unavailable(NoHealthyReplica())
    while (picked := ctx.routes.pick(route, tried)) is not None:
        tried.add(picked.id)
        try:
            answer = await proxy_of(request).http(
                request,
                picked.endpoint.url + path,
                picked.headers,
                raise_refused=True,
                whole=True,
                keep_cookies=False,
                via=picked.endpoint.via,
            )
        except UpstreamRefused as error:  # nothing was sent: the next replica gets it
            answer = JSONResponse(error_body(error.code, error.message), status_code=error.status)
            continue
        if not _proxy_failure(answer) or request.method not in IDEMPOTENT:
            return answer, picked.id
    return answer, None


def _confined(response: Response) -> Response:
    """A replica's answer may not act as a page of this server: whatever HTML it sends runs
    sandboxed (no script, no same-origin access to the platform with a visitor's cookie)."""
    for name, value in CONFINED:
        response.headers[name] = value  # replaces any the replica set
    return response


def _proxy_failure(answer: Response) -> bool:
    """An answer the proxy made (the replica was not reached), not the replica's own."""
    return answer.status_code == 502 and isinstance(answer, ProxyAnswer)


def _upstream_path(connection: HTTPConnection, name: str) -> str:
    """The path and query after /serve/NAME, as the client sent them (still encoded): what
    follows the raw path's name segment, however the name was encoded (``probe-%61`` is
    ``probe-a``). NotFound when that segment is not ``name`` (``a%2Fb``: no deployment's
    name holds a ``/``)."""
    raw = connection.scope.get("raw_path") or connection.url.path.encode()
    segments = raw.decode("latin-1").split("?", 1)[0].split("/", 3)  # "", serve, NAME, rest
    if len(segments) < 3 or unquote(segments[2]) != name:
        shown = unquote(segments[2]) if len(segments) > 2 else ""
        raise NotFound(f"no deployment is named {shown!r}: a deployment's name holds no '/'")
    path = "/" + (segments[3] if len(segments) > 3 else "")
    query = connection.scope.get("query_string", b"").decode("latin-1")
    return path + (f"?{query}" if query else "")


def _unavailable(error: NoHealthyReplica) -> JSONResponse:
    body = error_body(error.code, error.message, error.details)
    headers = {"Retry-After": str(error.retry_after)}
    return JSONResponse(body, status_code=error.status, headers=headers)
