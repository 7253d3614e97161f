"""The API's docs page (Swagger UI), served whole by this server so that it works offline.

Swagger UI's script and style come from an installed package (fastapi-offline ships them);
our own small script starts it, as the page may run no inline script under the UI's
Content-Security-Policy.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from gpupool.api.access import Rule, declare
from gpupool.api.ui import PAGE_HEADERS

SWAGGER_UI = Path(str(files("fastapi_offline") / "static"))
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gpupool API</title>
<link rel="icon" href="/static/favicon.svg">
<link rel="stylesheet" href="{assets}/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi="{openapi}"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="/static/docs.js"></script>
</body>
</html>
"""


def mount(app: FastAPI, docs_url: str, openapi_url: str) -> None:
    """Serve the docs page at ``docs_url`` and Swagger UI's files below it; both are public,
    as is the OpenAPI schema FastAPI serves at ``openapi_url`` (a route of the framework,
    which no rule can be declared on: tests/security/test_access_matrix.py lists it)."""
    assets = f"{docs_url}/assets"
    page = PAGE.format(assets=assets, openapi=openapi_url)
    router = APIRouter(include_in_schema=False)

    @router.get(docs_url, response_class=HTMLResponse)
    @declare(Rule.PUBLIC)
    def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    app.mount(assets, StaticFiles(directory=SWAGGER_UI), name="swagger-ui")
    app.include_router(router)
