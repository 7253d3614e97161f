"""The deployments' web pages: the deployments of the caller's teams, and one deployment's
page (its replicas with their node, state, health and restarts; its version; its requests
and latency; a form that sends a test request through /serve). Read through the same
service functions as the REST API; another team's deployment is a 404 page."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import ENV, PAGE_HEADERS, SignedIn
from gpupool.domain.jobs import Role
from gpupool.errors import ClientError
from gpupool.services import deployments
from gpupool.services.access import Principal

router = APIRouter(include_in_schema=False)
SAMPLE_BODY = {"inputs": [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]}


@router.get("/deployments", response_class=HTMLResponse)
@declare(Rule.PAGE)
def deployments_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return _to_login(request)
    who, csrf = signed_in
    found = deployments.list_deployments(ctx, who)
    traffic = {d.id: ctx.deployments.traffic.of_deployment(d.id) for d in found}
    return _render(
        "deployments.html",
        who,
        csrf,
        deployments=[d.model_dump(mode="json") for d in found],
        traffic={key: value.model_dump(mode="json") for key, value in traffic.items()},
    )


@router.get("/deployments/{name}", response_class=HTMLResponse)
@declare(Rule.PAGE)
def deployment_page(request: Request, name: str, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return _to_login(request)
    who, csrf = signed_in
    try:
        shown = deployments.show_deployment(ctx, who, name)
    except ClientError:  # not found, not visible, or stopped: the same page
        return _render("deployment_missing.html", who, csrf, status=404, name=name)
    return _render(
        "deployment.html",
        who,
        csrf,
        deployment=shown.model_dump(mode="json"),
        can_call=who.role != Role.VIEWER,
        sample=json.dumps(SAMPLE_BODY),
    )


def _render(
    template: str, who: Principal, csrf: str, status: int = 200, **context: Any
) -> HTMLResponse:
    html = ENV.get_template(template).render(
        user=who, csrf_token=csrf, page="deployments", **context
    )
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)


def _to_login(request: Request) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(request.url.path, safe='/')}", status_code=303)
