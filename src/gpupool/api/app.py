"""The FastAPI application: REST API under /api/v1 and the web UI, on one port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI

import gpupool
from gpupool.api import docs, errors, params, ui
from gpupool.api.limits import AllowedHosts, BodyLimit
from gpupool.api.routers import admin, cluster, code, isolation, jobs, nodes, pool, session
from gpupool.services.platform import Platform

API_PREFIX = "/api/v1"


def create_app(platform: Platform, start_loop: bool = True) -> FastAPI:
    """Build the app around an opened platform; the lifespan runs its control loop."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if start_loop:
            platform.start()
        try:
            yield
        finally:
            platform.stop()

    app = FastAPI(
        title="gpupool",
        version=gpupool.__version__,
        lifespan=lifespan,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # our own page, that works offline (api/docs.py)
        redoc_url=None,
        dependencies=[Depends(params.plain_parameters)],  # no NUL reaches a lookup
    )
    app.state.platform = platform
    errors.install(app)
    api = APIRouter(prefix=API_PREFIX)
    for module in (session, jobs, nodes, pool, isolation, admin, cluster, code):
        api.include_router(module.router)
    app.include_router(api)
    ui.mount(app)
    docs.mount(app, f"{API_PREFIX}/docs", app.openapi_url)
    # code uploads count their own bodies, against max_code_bytes (services/code.py)
    own_limits = (f"{API_PREFIX}/code",)
    app.add_middleware(BodyLimit, max_bytes=platform.settings.max_body_bytes, own_limits=own_limits)
    # Added last, so it runs first: a request for an unknown host gets no further.
    app.add_middleware(AllowedHosts, hosts=platform.settings.host_names())
    return app
