"""The model registry's web pages: the models of the caller's teams, and one model's page
(its versions; one version's source job, metrics and files). Read through the same service
functions as the REST API; another team's model is a 404 page, as if it did not exist."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import SignedIn, render, to_login
from gpupool.errors import ClientError
from gpupool.services import models

router = APIRouter(include_in_schema=False)
PAGE = "models"  # the part of the menu these pages are under


@router.get("/models", response_class=HTMLResponse)
@declare(Rule.PAGE)
def models_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    found = [model.model_dump(mode="json") for model in models.list_models(ctx, who)]
    return render("models.html", who, csrf, page=PAGE, models=found)


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
        return to_login(request)
    who, csrf = signed_in
    try:
        model = models.show_model(ctx, who, name, team)
        number = int(version) if version.isdigit() else model.latest_version
        shown = models.show_version(ctx, who, name, number, team)
    except ClientError:  # not found, or not visible: the same page
        what = f"model {name} of team {team}"
        return render(
            "not_found.html", who, csrf, status=404, page=PAGE, kind="model", name=name, what=what
        )
    return render(
        "model.html",
        who,
        csrf,
        page=PAGE,
        model=model.model_dump(mode="json"),
        version=shown.model_dump(mode="json"),
    )
