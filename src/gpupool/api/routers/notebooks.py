"""Notebooks: the REST API (``/api/v1/notebooks``) and the proxy to each JupyterLab
(``/notebooks/<id>/...``, HTTP and WebSocket).

Who may call: a notebook's team sees it (TEAM_READ), its team's members and the pool's
admins stop it (TEAM_WRITE), and its owner alone resumes and opens it (OWNER): anyone else
gets 404 there, admins included (opening a notebook runs code as its owner). The proxy adds
the notebook's token for JupyterLab; neither the token, the platform's cookie nor the
caller's API token reach the browser or JupyterLab (``gpupool.proxy``).
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Query, Request, WebSocket, status
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from gpupool.api.access import Rule, allow, declare
from gpupool.api.deps import Id, PlatformDep
from gpupool.api.proxied import proxy_caller, refusal
from gpupool.api.ui import ENV, PAGE_HEADERS
from gpupool.domain.notebooks import IdleGpuView, NotebookRequest, NotebookView, base_path
from gpupool.errors import GpupoolError, NotebookNotRunning, UpstreamUnavailable, error_body
from gpupool.proxy import (
    PROXIED_METHODS,
    Kind,
    NoRoute,
    Route,
    proxy_of,
    refuse_websocket,
)
from gpupool.services import notebooks
from gpupool.services.core import Principal
from gpupool.services.platform import Platform

router = APIRouter(prefix="/notebooks", tags=["notebooks"])
proxy_router = APIRouter(include_in_schema=False)
PREFIX = "/notebooks"
LOGIN_COOKIE = b"username-"  # JupyterLab's own login cookie: username-<host>-<port>


@router.post("", status_code=status.HTTP_201_CREATED, response_model=NotebookView)
def start(
    body: NotebookRequest, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> NotebookView:
    """Start a JupyterLab of yours in your workspace (a job of kind notebook, not
    preemptible); open it at its ``url`` once it runs."""
    return notebooks.start_notebook(ctx, who, body)


@router.get("", response_model=list[NotebookView])
def list_notebooks(
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.SIGNED_IN)],
    mine: Annotated[bool, Query(description="only your own")] = False,
) -> list[NotebookView]:
    """The notebooks of your teams (every team's, for admins), newest first."""
    return notebooks.list_notebooks(ctx, who, mine)


@router.get("/idle-gpus", response_model=list[IdleGpuView])
def idle_gpus(
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.ADMIN)],
    longer_than: Annotated[float, Query(ge=0, le=10**9, description="seconds idle")] = 60,
) -> list[IdleGpuView]:
    """Admins: who holds GPUs in a notebook that has been idle, and for how long."""
    return notebooks.idle_gpus(ctx, who, longer_than)


@router.get("/{notebook_id}", response_model=NotebookView)
def show(
    notebook_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_READ)]
) -> NotebookView:
    return notebooks.show_notebook(ctx, who, notebook_id)


@router.post("/{notebook_id}/stop", response_model=NotebookView)
def stop(
    notebook_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> NotebookView:
    """Stop it (its job ends; its workspace stays): its GPUs go back to the pool."""
    return notebooks.stop_notebook(ctx, who, notebook_id)


@router.post("/{notebook_id}/resume", response_model=NotebookView)
def resume(
    notebook_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.OWNER)]
) -> NotebookView:
    """Start your stopped notebook again, in the same workspace (a new job)."""
    return notebooks.resume_notebook(ctx, who, notebook_id)


# -- the proxy ---------------------------------------------------------------------------------


@proxy_router.api_route(PREFIX + "/{notebook_id}/{path:path}", methods=PROXIED_METHODS)
@declare(Rule.OWNER)
async def proxy(notebook_id: Id, path: str, request: Request, ctx: PlatformDep) -> Response:
    """Forward the owner's request to the notebook's JupyterLab, with its token."""
    try:
        route = await _route(ctx, request, notebook_id)
    except NotebookNotRunning as error:
        return _not_running(request, notebook_id, error)
    except GpupoolError as error:
        return refusal(request, error)
    upstream = route.upstreams[0]
    target = upstream.endpoint.url + _upstream_path(request)
    answer = await proxy_of(request).http(
        request, target, _sent(request, upstream.headers), via=upstream.endpoint.via
    )
    if answer.status_code == 502 and not isinstance(answer, StreamingResponse):
        # not answering yet: JupyterLab takes a few seconds to start listening
        starting = NotebookNotRunning(
            f"notebook {notebook_id} is starting: JupyterLab does not answer yet", state="starting"
        )
        return _not_running(request, notebook_id, starting)
    return await _without_token(_without_login_cookie(answer), route.secret)


@proxy_router.websocket(PREFIX + "/{notebook_id}/{path:path}")
async def proxy_websocket(websocket: WebSocket, notebook_id: Id, path: str) -> None:
    """A WebSocket (a kernel's channels, a terminal) to the owner's notebook."""
    ctx: Platform = websocket.app.state.platform
    try:
        route = await _route(ctx, websocket, notebook_id)
    except GpupoolError as error:
        await refuse_websocket(websocket, error)
        return
    upstream = route.upstreams[0]
    target = "ws" + upstream.endpoint.url.removeprefix("http") + _upstream_path(websocket)
    await proxy_of(websocket).websocket(
        websocket, target, upstream.headers, via=upstream.endpoint.via
    )


async def _route(ctx: Platform, connection: HTTPConnection, notebook_id: int) -> Route:
    """The notebook's route for its caller: one call to the proxy's table; only where it
    has none do the notebook's records say why (not its caller's, stopped, starting)."""
    who = await proxy_caller(connection)
    try:
        return ctx.routes.route(Kind.NOTEBOOK, str(notebook_id), who)
    except NoRoute:
        return await run_in_threadpool(notebooks.not_served, ctx, who, notebook_id)


def _sent(request: Request, headers: Mapping[str, str]) -> dict[str, str]:
    """The headers added for JupyterLab: its token; for a page, no compression (so that
    ``_without_token`` can read it)."""
    sent = dict(headers)
    if request.method == "GET" and "/static/" not in request.url.path:
        sent["Accept-Encoding"] = "identity"
    return sent


async def _without_token(answer: Response, token: str) -> Response:
    """JupyterLab writes its token into its pages (their page config), for its script to
    send back: the proxy adds it instead, so it is taken out of every HTML page (the page's
    script then sends none, and the proxy's own is used)."""
    kind = answer.headers.get("content-type", "")
    if not isinstance(answer, StreamingResponse) or not kind.startswith("text/html"):
        return answer
    body = b"".join([chunk async for chunk in answer.body_iterator])
    if answer.background is not None:
        await answer.background()
    raw = [(k, v) for k, v in answer.raw_headers if k.lower() != b"content-length"]
    if answer.headers.get("content-encoding", "identity") == "gzip":
        body = gzip.decompress(body)
        raw = [(k, v) for k, v in raw if k.lower() != b"content-encoding"]
    elif answer.headers.get("content-encoding", "identity") != "identity":
        return _refused_page()
    body = body.replace(token.encode(), b"")
    scrubbed = Response(body, status_code=answer.status_code)
    scrubbed.raw_headers = [*raw, (b"content-length", str(len(body)).encode())]
    return scrubbed


def _without_login_cookie(answer: Response) -> Response:
    """JupyterLab answers a request its token let in with a login cookie of its own
    (``username-<host>-<port>``), which would let its holder in on its port without the
    token: it never reaches the browser (the proxy adds the token to every request)."""
    answer.raw_headers = [
        (name, value)
        for name, value in answer.raw_headers
        if name.lower() != b"set-cookie" or not value.lstrip().startswith(LOGIN_COOKIE)
    ]
    return answer


def _refused_page() -> Response:
    """A page whose encoding the proxy cannot read: not sent (it may hold the token)."""
    error = UpstreamUnavailable("the notebook answered in an encoding the proxy cannot read")
    return JSONResponse(error_body(error.code, error.message), status_code=502)


def _upstream_path(connection: HTTPConnection) -> str:
    """The path and query as the client sent them (still encoded): JupyterLab serves under
    the same base path (its base_url)."""
    raw = connection.scope.get("raw_path") or connection.url.path.encode()
    path = raw.decode("latin-1").split("?", 1)[0]
    query = connection.scope.get("query_string", b"").decode("latin-1")
    return path + (f"?{query}" if query else "")


def _not_running(request: Request, notebook_id: int, error: NotebookNotRunning) -> Response:
    """The owner's browser opening a page of a notebook that does not serve: a page that
    says why (and reloads while it starts); any other request: 503 with the error."""
    if request.method != "GET" or request.url.path.startswith(base_path(notebook_id) + "api/"):
        return refusal(request, error)
    state = error.details.get("state", "")
    html = ENV.get_template("notebook_waiting.html").render(
        notebook_id=notebook_id,
        message=error.message,
        state=state,
        user=None,
        csrf_token=None,
        page="notebook",
    )
    headers = PAGE_HEADERS | ({"Refresh": "3"} if state in ("pending", "starting") else {})
    return HTMLResponse(html, headers=headers)
