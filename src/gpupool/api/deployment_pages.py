"""The deployments' web pages: the deployments of the caller's teams, and one deployment's
page (its replicas with their node, state, health and restarts; its version; its requests
and latency; a form that sends a test request through /serve; buttons that scale, update
and stop it through the REST API). Read through the same
service functions as the REST API; another team's deployment is a 404 page."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import SignedIn, render, to_login
from gpupool.domain.deployments import MAX_REPLICAS
from gpupool.domain.jobs import Role
from gpupool.errors import AmbiguousDeployment, ClientError
from gpupool.services import deployments
from gpupool.services.core import Principal

router = APIRouter(include_in_schema=False)
PAGE = "deployments"  # the part of the menu these pages are under
SAMPLE_BODY = {"inputs": [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]}


@router.get("/deployments", response_class=HTMLResponse)
@declare(Rule.PAGE)
def deployments_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    found = deployments.list_deployments(ctx, who)
    traffic = {d.id: ctx.deployments.traffic.of_deployment(d.id) for d in found}
    return render(
        "deployments.html",
        who,
        csrf,
        page=PAGE,
        deployments=[d.model_dump(mode="json") for d in found],
        traffic={key: value.model_dump(mode="json") for key, value in traffic.items()},
    )


@router.get("/deployments/{name}", response_class=HTMLResponse)
@declare(Rule.PAGE)
def deployment_page(
    request: Request,
    name: str,
    ctx: PlatformDep,
    signed_in: SignedIn,
    team: Annotated[str | None, Query(max_length=100)] = None,
) -> Response:
    """``?team=``: its team, where several of the caller's teams have a deployment ``name``
    (the list's links carry it then)."""
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    try:
        shown = deployments.show_deployment(ctx, who, name, team)
    except AmbiguousDeployment as error:
        return _ambiguous(who, csrf, name, error)
    except ClientError:  # not found, not visible, or stopped: the same page
        return render(
            "not_found.html",
            who,
            csrf,
            status=404,
            page=PAGE,
            kind="deployment",
            name=name,
            what=f"running deployment {name}",
            maybe="It may not exist, have been stopped, or belong to a team you are not a "
            "member of.",
        )
    return render(
        "deployment.html",
        who,
        csrf,
        page=PAGE,
        deployment=shown.model_dump(mode="json"),
        can_call=who.role != Role.VIEWER,  # send test requests, scale, update and stop
        sample=json.dumps(SAMPLE_BODY),
        max_replicas=MAX_REPLICAS,
    )


def _ambiguous(who: Principal, csrf: str, name: str, error: AmbiguousDeployment) -> Response:
    """Several of the caller's teams have a deployment ``name``: a link to each."""
    return render(
        "deployment_choice.html",
        who,
        csrf,
        status=409,
        page=PAGE,
        name=name,
        teams=error.details.get("teams", []),
    )
