"""The Python environments' web pages: the environments of the caller's teams (and those for
every team), and one environment's page (its versions; one version's packages, lock and how to
run in it). Read through the same service functions as the REST API; another team's
environment is a 404 page, as if it did not exist."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import SignedIn, render, to_login
from gpupool.domain.environments import EnvironmentDetailView, EnvironmentVersionView
from gpupool.errors import ClientError
from gpupool.services import environments

router = APIRouter(include_in_schema=False)
PAGE = "environments"  # the part of the menu these pages are under
EVERY_TEAM = "all"  # the team part of the address of an environment for every team


@router.get("/environments", response_class=HTMLResponse)
@declare(Rule.PAGE)
def environments_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    found = [e.model_dump(mode="json") for e in environments.list_environments(ctx, who)]
    return render("environments.html", who, csrf, page=PAGE, environments=found)


@router.get("/environments/{team}/{name}", response_class=HTMLResponse)
@declare(Rule.PAGE)
def environment_page(
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
    owner = None if team == EVERY_TEAM else team
    try:
        detail = environments.show(ctx, who, name, owner)
        if not isinstance(detail, EnvironmentDetailView) or detail.team != owner:
            raise LookupError(name)  # another team's of that name, or one for every team
        chosen = version or detail.latest.short_id
        shown = environments.show(ctx, who, f"{name}@{chosen}", owner)
        if not isinstance(shown, EnvironmentVersionView):
            raise LookupError(chosen)
    except (ClientError, LookupError):  # not found, or not visible: the same page
        what = f"environment {name} of team {team}"
        return render(
            "not_found.html",
            who,
            csrf,
            status=404,
            page=PAGE,
            kind="environment",
            name=name,
            what=what,
        )
    return render(
        "environment.html",
        who,
        csrf,
        page=PAGE,
        environment=detail.model_dump(mode="json"),
        version=shown.model_dump(mode="json"),
        team_part=team,
    )
