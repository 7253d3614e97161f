"""Container images: pulled from a registry the site allows or imported from an archive,
listed and removed per team; a job runs in one with ``image`` (``gpupool run --image``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, status
from pydantic import Field

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.api.schemas import Strict
from gpupool.domain.images import MAX_NAME, ImageView
from gpupool.domain.text import STORABLE
from gpupool.services import images
from gpupool.services.core import Principal

router = APIRouter(prefix="/images", tags=["images"])

Name = Annotated[
    str,
    Path(
        max_length=MAX_NAME,
        description="the image's name as listed (registry/path:tag) or its digest (sha256:...)",
    ),
]
Team = Annotated[
    str | None,
    Query(max_length=100, description="the image's team, when several of yours hold one"),
]
# The body is read as a stream (never whole in memory), so it is declared here for the docs.
ARCHIVE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "an OCI archive (skopeo copy ... oci-archive:FILE) or what 'docker "
        "save' writes, one image",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


class ImagePull(Strict):
    """An image to pull from a registry the site allows (GPUPOOL_IMAGE_REGISTRIES)."""

    ref: Annotated[str, STORABLE] = Field(
        max_length=MAX_NAME,
        description="[registry/]path[:tag][@sha256:...], as docker names images",
        examples=["registry.example.org/team/pytorch:2.4"],
    )
    team: Annotated[str | None, STORABLE] = Field(
        default=None,
        max_length=100,
        description="the team it is for (default: your only team; an admin's without one: "
        "the site's, for every team)",
    )


@router.get("", response_model=list[ImageView])
def list_images(
    ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)], team: Team = None
) -> list[ImageView]:
    """The images of your teams and the site's (every one, for an admin)."""
    return images.list_images(ctx, who, team)


@router.post("/pull", status_code=status.HTTP_201_CREATED, response_model=ImageView)
def pull(
    body: ImagePull, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> ImageView:
    """Pull the image for the team (again: a moved tag is followed); it is kept once by the
    digest of its manifest. ``403 registry_not_allowed`` for a registry the site does not
    allow, ``422 image_pull_failed`` when the registry does not give it or it cannot be
    unpacked safely."""
    return images.pull(ctx, who, body.ref, body.team)


@router.post(
    "/import",
    status_code=status.HTTP_201_CREATED,
    response_model=ImageView,
    openapi_extra=ARCHIVE_BODY,
)
async def import_archive(
    request: Request,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.SUBMIT)],
    name: Annotated[
        str | None,
        Query(max_length=MAX_NAME, description="path[:tag] to list it as (default: the archive's)"),
    ] = None,
    team: Team = None,
) -> ImageView:
    """Import the image archive in the body. ``413 image_too_large`` over
    GPUPOOL_MAX_IMAGE_BYTES, ``422 bad_image_archive`` for anything but one image's OCI or
    docker archive, or one that cannot be unpacked safely."""
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else None
    return await images.receive_archive(ctx, who, request.stream(), name, team, declared)


@router.get("/{name:path}", response_model=ImageView)
def show_image(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    team: Team = None,
) -> ImageView:
    """One image: its digest, size, team and config (Env, Entrypoint, Cmd, WorkingDir)."""
    return images.show_image(ctx, who, name, team)


@router.delete("/{name:path}", response_model=ImageView)
def remove(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> ImageView:
    """Remove the team's image (an admin: a site image too). ``409 image_in_use`` while a
    job of the team that has not ended runs in it."""
    return images.remove(ctx, who, name, team)
