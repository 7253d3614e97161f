"""The model registry's web pages: the models of the caller's teams, and one model's page
(its versions; one version's source job, metrics and files). Read through the same service
functions as the REST API; another team's model is a 404 page, as if it did not exist."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import ENV, PAGE_HEADERS, SignedIn
from gpupool.errors import ClientError
from gpupool.services import models
from gpupool.services.access import Principal

router = APIRouter(include_in_schema=False)


@router.get("/models", response_class=HTMLResponse)
@declare(Rule.PAGE)
def models_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return _to_login(request)
    who, csrf = signed_in
    found = [model.model_dump(mode="json") for model in models.list_models(ctx, who)]
    return _render("models.html", who, csrf, models=found)


@router.get("/models/{team}/{name}", response_class=HTMLResponse)
@declare(Rule.PAGE)
def model_page(
    request: Request,
    team: str,
    name: str,
    ctx: PlatformDep,
    signed_in: SignedIn,
    version: str = "",
) -> Response:
    if not signed_in:
        return _to_login(request)
    who, csrf = signed_in
    try:
        model = models.show_model(ctx, who, name, team)
        number = int(version) if version.isdigit() else model.latest_version
        shown = models.show_version(ctx, who, name, number, team)
    except ClientError:  # not found, or not visible: the same page
        return _render("model_missing.html", who, csrf, status=404, name=name, team=team)
    return _render(
        "model.html",
        who,
        csrf,
        model=model.model_dump(mode="json"),
        version=shown.model_dump(mode="json"),
    )


def _render(
    template: str, who: Principal, csrf: str, status: int = 200, **context: Any
) -> HTMLResponse:
    html = ENV.get_template(template).render(user=who, csrf_token=csrf, page="models", **context)
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)


def _to_login(request: Request) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(request.url.path, safe='/')}", status_code=303)
