"""The FastAPI application: REST API under /api/v1 and the web UI, on one port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI

import gpupool
from gpupool.api import (
    dataset_pages,
    deployment_pages,
    docs,
    environment_pages,
    errors,
    experiment_pages,
    model_pages,
    notebook_pages,
    params,
    prometheus,
    scheduler_pages,
    serve,
    ui,
)
from gpupool.api.limits import AllowedHosts, BodyLimit
from gpupool.api.routers import (
    admin,
    cluster,
    code,
    isolation,
    jobs,
    nodes,
    notebooks,
    pool,
    scheduler,
    session,
)
from gpupool.api.routers import datasets as dataset_api
from gpupool.api.routers import deployments as deployment_api
from gpupool.api.routers import environments as environment_api
from gpupool.api.routers import experiments as experiment_api
from gpupool.api.routers import images as image_api
from gpupool.api.routers import jobfiles as jobfile_api
from gpupool.api.routers import metrics as job_metrics
from gpupool.api.routers import models as model_registry
from gpupool.proxy import Proxy
from gpupool.services.platform import Platform

API_PREFIX = "/api/v1"


def create_app(platform: Platform, start_loop: bool = True) -> FastAPI:
    """Build the app around an opened platform; the lifespan runs its control loop."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if start_loop:
            platform.start()
        _app.state.proxy = Proxy()  # made on the server's event loop, which its client uses
        try:
            yield
        finally:
            await _app.state.proxy.aclose()
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
    # /serve/NAME/... first: routes are matched in order, and it is the one called most
    app.include_router(serve.router)
    api = APIRouter(prefix=API_PREFIX)
    for module in (session, jobs, nodes, pool, isolation, admin, cluster, code, model_registry):
        api.include_router(module.router)
    api.include_router(job_metrics.router)
    api.include_router(deployment_api.router)
    api.include_router(notebooks.router)
    api.include_router(environment_api.router)
    api.include_router(dataset_api.router)
    api.include_router(image_api.router)
    api.include_router(jobfile_api.router)
    api.include_router(experiment_api.router)
    api.include_router(scheduler.router)
    app.include_router(api)
    ui.mount(app)
    app.include_router(model_pages.router)
    app.include_router(environment_pages.router)
    app.include_router(dataset_pages.router)
    app.include_router(deployment_pages.router)
    app.include_router(experiment_pages.router)  # /experiments, /experiments/REF: pages
    app.include_router(scheduler_pages.router)  # /scheduler: the live settings, their history
    app.include_router(notebook_pages.router)  # /notebooks, /notebooks/ID: pages
    app.include_router(notebooks.proxy_router)  # /notebooks/ID/...: JupyterLab behind the proxy
    prometheus.mount(app, platform)  # /metrics, with a registry of this app's own
    docs.mount(app, f"{API_PREFIX}/docs", app.openapi_url)
    # code uploads count their own bodies, against max_code_bytes (services/jobs/_code.py)
    # and notebooks' bodies (a saved notebook, an upload) are streamed by the proxy under its
    # own limit (proxy.ProxyLimits); /serve reads its bodies whole, so the limit holds
    # dataset blobs count theirs against max_dataset_bytes (services/datasets/_blobs.py)
    own_limits = (f"{API_PREFIX}/code", "/notebooks", f"{API_PREFIX}/dataset-blobs")
    # image archives count theirs against max_image_bytes (services/images/_images.py)
    own_limits += (f"{API_PREFIX}/images/import",)
    app.add_middleware(BodyLimit, max_bytes=platform.settings.max_body_bytes, own_limits=own_limits)
    # Added last, so it runs first: a request for an unknown host gets no further.
    app.add_middleware(AllowedHosts, hosts=platform.settings.host_names())
    return app
