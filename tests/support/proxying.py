"""The platform's Proxy in front of a real listening job, for the proxy's tests.

An in-process platform (real database, real local executor and sandbox) runs the echo server
(tests/support/echo_server.py) as a job with ``listen`` on. A tiny app made here, served by a
real uvicorn on 127.0.0.1 in a thread, lets callers in with ``api.proxied`` and reaches the
job with ``endpoint_of`` and the app's ``Proxy``, as the routers of notebooks and deployments
do (no test route is part of the product):

    /w/{job_id}/{path}     HTTP and WebSocket to the job, for a signed-in caller
    /whole/{job_id}/{path} HTTP to the job as /serve reaches a replica (small answers whole)
    /port/{port}/{path}    HTTP and WebSocket to 127.0.0.1:port, no sign-in (a workload gone)

The HTTP answers of /whole and /port that the proxy made itself carry ``X-Proxy-Made``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import Response
from fastapi.testclient import TestClient
from starlette.concurrency import run_in_threadpool

from gpupool.api.proxied import proxy_caller, refusal
from gpupool.domain.endpoints import Endpoint
from gpupool.errors import GpupoolError, NotFound
from gpupool.proxy import (
    PROXIED_METHODS,
    Proxy,
    ProxyAnswer,
    ProxyLimits,
    client_via,
    proxy_of,
    refuse_websocket,
)
from gpupool.services.jobs import endpoint_of
from gpupool.services.platform import Platform
from tests.support import echo_server
from tests.support.platform import make_settings, running_app, submit, wait_job
from tests.support.server import free_port
from tests.support.waiting import wait_for

# what the tiny app adds towards the workload, as a notebook's router adds its token
WORKLOAD_HEADERS = {"X-Workload-Token": "the-workloads-own"}
MAX_BODY_BYTES = 2 * 1024**2  # the tiny app's proxy takes bodies up to this


@dataclass
class Proxied:
    """``client``: the platform's API as its admin; ``url``: the tiny app's; ``token``: the
    admin's API token; ``job_id``: the echo job, running."""

    client: TestClient
    platform: Platform
    url: str
    token: str
    job_id: int

    def endpoint(self, job_id: int | None = None) -> Endpoint | None:
        with self.platform.db.reader() as session:
            return endpoint_of(session, self.platform.executor, job_id or self.job_id)

    def start_echo(self) -> int:
        """Another echo job; its id once its server answers."""
        job = submit(self.client, echo_command(), listen=True)
        wait_job(self.client, job["id"], {"running"})
        wait_for(lambda: self.answers(job["id"]), 30, f"job {job['id']} to answer")
        return job["id"]

    def answers(self, job_id: int) -> bool:
        found = self.endpoint(job_id)
        if found is None:
            return False
        try:
            with client_via(found.via, 2) as client:  # through its runner's socket: the only way in
                return client.get(f"{found.url}/ready").status_code == 200
        except (httpx.HTTPError, OSError):
            return False


def echo_command() -> list[str]:
    return [sys.executable, "-c", echo_server.source()]


@contextmanager
def proxied_echo(data_dir: Path) -> Iterator[Proxied]:
    """The platform with an echo job running, and the tiny app in front of it."""
    with running_app(make_settings(data_dir)) as (client, platform):
        token = client.headers["Authorization"].removeprefix("Bearer ")
        with served(proxy_app(platform)) as url:
            proxied = Proxied(client, platform, url, token, 0)
            proxied.job_id = proxied.start_echo()
            yield proxied


def proxy_app(platform: Platform) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.proxy = Proxy(ProxyLimits(max_body_bytes=MAX_BODY_BYTES))
        yield
        await app.state.proxy.aclose()

    app = FastAPI(lifespan=lifespan)
    app.state.platform = platform

    @app.api_route("/w/{job_id}/{path:path}", methods=PROXIED_METHODS)
    async def to_job(request: Request, job_id: int, path: str) -> Response:
        try:
            await proxy_caller(request)
            found = await _endpoint(platform, job_id)
        except GpupoolError as error:
            return refusal(request, error)
        target = _target(found.url, path, request.url.query)
        return await proxy_of(request).http(request, target, WORKLOAD_HEADERS, via=found.socket)

    @app.api_route("/whole/{job_id}/{path:path}", methods=PROXIED_METHODS)
    async def whole_to_job(request: Request, job_id: int, path: str) -> Response:
        found = await _endpoint(platform, job_id)
        target = _target(found.url, path, request.url.query)
        answer = await proxy_of(request).http(request, target, whole=True, via=found.socket)
        return _marked(answer)

    @app.websocket("/w/{job_id}/{path:path}")
    async def ws_to_job(websocket: WebSocket, job_id: int, path: str) -> None:
        try:
            await proxy_caller(websocket)
            found = await _endpoint(platform, job_id)
        except GpupoolError as error:
            await refuse_websocket(websocket, error)
            return
        target = _target(found.url.replace("http://", "ws://"), path, websocket.url.query)
        await proxy_of(websocket).websocket(websocket, target, WORKLOAD_HEADERS, via=found.socket)

    @app.api_route("/port/{port}/{path:path}", methods=PROXIED_METHODS)
    async def to_port(request: Request, port: int, path: str) -> Response:
        target = f"http://127.0.0.1:{port}/{path}"
        return _marked(await proxy_of(request).http(request, target, whole=True))

    @app.websocket("/port/{port}/{path:path}")
    async def ws_to_port(websocket: WebSocket, port: int, path: str) -> None:
        await proxy_of(websocket).websocket(websocket, f"ws://127.0.0.1:{port}/{path}")

    return app


@contextmanager
def served(app: FastAPI) -> Iterator[str]:
    """``app`` served by uvicorn (WebSockets on) on 127.0.0.1, in a thread; its URL."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        ws="websockets-sansio",
        log_level="warning",
        proxy_headers=False,  # the client's address is the connection's, not a header's
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="proxy-app", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "the proxy's app to serve")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def _marked(answer: Response) -> Response:
    """An answer the proxy made itself, marked so (as /serve tells them apart)."""
    if isinstance(answer, ProxyAnswer):
        answer.headers["X-Proxy-Made"] = "1"
    return answer


async def _endpoint(platform: Platform, job_id: int) -> Endpoint:
    def find() -> Endpoint | None:
        with platform.db.reader() as session:
            return endpoint_of(session, platform.executor, job_id)

    found = await run_in_threadpool(find)
    if found is None:
        raise NotFound(f"job {job_id} does not listen now")
    return found


def _target(origin: str, path: str, query: str) -> str:
    return f"{origin}/{path}" + (f"?{query}" if query else "")
