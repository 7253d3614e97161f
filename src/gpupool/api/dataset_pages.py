"""The datasets' web pages: the datasets and volumes of the caller's teams, and one
dataset's page (its versions; one version's files). Read through the same service functions
as the REST API; another team's dataset is a 404 page, as if it did not exist."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import SignedIn, render, to_login
from gpupool.errors import ClientError
from gpupool.services import datasets

router = APIRouter(include_in_schema=False)
PAGE = "datasets"  # the part of the menu these pages are under
SHOWN_FILES = 500  # a version's files listed on its page (the CLI and API list them all)


@router.get("/datasets", response_class=HTMLResponse)
@declare(Rule.PAGE)
def datasets_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    found = [d.model_dump(mode="json") for d in datasets.list_datasets(ctx, who)]
    volumes = [v.model_dump(mode="json") for v in datasets.list_volumes(ctx, who)]
    return render("datasets.html", who, csrf, page=PAGE, datasets=found, volumes=volumes)


@router.get("/datasets/{team}/{name}", response_class=HTMLResponse)
@declare(Rule.PAGE)
def dataset_page(
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
        detail = datasets.show_dataset(ctx, who, name, team)
        number = int(version) if version.isdigit() else detail.latest_version
        shown = datasets.show_version(ctx, who, name, number, team)
    except ClientError:  # not found, or not visible: the same page
        what = f"dataset {name} of team {team}"
        return render(
            "not_found.html", who, csrf, status=404, page=PAGE, kind="dataset", name=name, what=what
        )
    files = shown.model_dump(mode="json")["files"]
    return render(
        "dataset.html",
        who,
        csrf,
        page=PAGE,
        dataset=detail.model_dump(mode="json"),
        version=shown.model_dump(mode="json", exclude={"files"}),
        files=files[:SHOWN_FILES],
        more_files=max(0, len(files) - SHOWN_FILES),
    )
