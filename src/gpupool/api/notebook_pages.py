"""The notebooks' web pages: the list (with a form that starts one, and, for admins, who
holds idle GPUs in a notebook), and a notebook's page (its state, why it stopped, Open,
Stop, Resume). Read through the same service functions as the REST API; another team's
notebook is a 404 page, as if it did not exist."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import SignedIn, render, to_login
from gpupool.errors import NotFound
from gpupool.services import jobs, notebooks

router = APIRouter(include_in_schema=False)
PAGE = "notebooks"  # the part of the menu these pages are under
IDLE_SHOWN_AFTER = 60.0  # seconds (or a quarter of the idle time): not those idle a moment


@router.get("/notebooks", response_class=HTMLResponse)
@declare(Rule.PAGE)
def notebooks_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    found = [n.model_dump(mode="json") for n in notebooks.list_notebooks(ctx, who)]
    shown_after = min(IDLE_SHOWN_AFTER, ctx.settings.notebook_idle_seconds / 4)
    idle = notebooks.idle_gpus(ctx, who, shown_after) if who.is_admin else []
    options = jobs.submit_options(ctx, who)
    return render(
        "notebooks.html",
        who,
        csrf,
        page=PAGE,
        notebooks=found,
        idle=[i.model_dump(mode="json") for i in idle],
        teams=options.own_teams or options.teams,
        viewer=options.viewer,
        idle_limit=ctx.settings.notebook_idle_seconds,
    )


@router.get("/notebooks/{notebook_id}", response_class=HTMLResponse)
@declare(Rule.PAGE)
def notebook_page(
    request: Request, notebook_id: str, ctx: PlatformDep, signed_in: SignedIn
) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    try:
        if not notebook_id.isascii() or not notebook_id.isdigit() or len(notebook_id) > 9:
            raise NotFound()
        shown = notebooks.show_notebook(ctx, who, int(notebook_id)).model_dump(mode="json")
    except NotFound:
        return render(
            "not_found.html", who, csrf, status=404, page=PAGE, kind="notebook", name=notebook_id
        )
    return render(
        "notebook.html",
        who,
        csrf,
        page=PAGE,
        notebook=shown,
        own=shown["user"] == who.name,
        can_stop=who.role.value != "viewer",
    )
