"""Datasets (a team's immutable, numbered versions over content-addressed blobs) and volumes
(a team's mutable directories, mounted read-write by its jobs).

Uploading a directory: ``PUT /dataset-blobs/{sha256}`` the manifest, ``POST
/datasets/{name}/uploads`` to learn which blobs the team lacks, ``PUT`` those, then ``POST
/datasets/{name}/versions`` to commit (``gpupool dataset create --from DIR`` does all four).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response, status
from pydantic import Field, model_validator

from gpupool.api.access import Rule, allow
from gpupool.api.deps import MAX_ID, PlatformDep
from gpupool.api.schemas import Strict
from gpupool.domain.datasetrefs import SHA256_PATTERN
from gpupool.domain.datasets import (
    BlobView,
    DatasetDetailView,
    DatasetVersionView,
    DatasetView,
    UploadPlanView,
    VolumeView,
)
from gpupool.domain.text import STORABLE
from gpupool.errors import InvalidRequest
from gpupool.services import datasets
from gpupool.services.core import Principal

router = APIRouter(tags=["datasets"])

Name = Annotated[str, Path(max_length=100, description="the dataset's name")]
Version = Annotated[int, Path(ge=1, le=MAX_ID, description="a version's number")]
Sha256 = Annotated[
    str, Path(pattern=SHA256_PATTERN, description="the SHA-256 of the blob's bytes, in hex")
]
Team = Annotated[
    str | None,
    Query(max_length=100, description="the dataset's team, when several of yours have one"),
]
BLOB_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the file's bytes (or a manifest's), streamed",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


class UploadAsk(Strict):
    """A manifest uploaded as a blob, to become a version of the dataset."""

    manifest: str = Field(pattern=SHA256_PATTERN, description="the manifest blob's SHA-256")
    team: Annotated[str | None, STORABLE] = Field(
        default=None, max_length=100, description="the team (default: your only one)"
    )


class VersionCreate(Strict):
    """A new version: an uploaded manifest whose blobs the team holds, or a job's outputs."""

    manifest: str | None = Field(
        default=None, pattern=SHA256_PATTERN, description="the manifest blob's SHA-256"
    )
    from_job: int | None = Field(
        default=None, ge=1, le=MAX_ID, description="the job whose outputs the version holds"
    )
    path: Annotated[str, STORABLE] = Field(
        default="", max_length=4096, description="with from_job: a path inside its outputs"
    )
    team: Annotated[str | None, STORABLE] = Field(default=None, max_length=100)
    description: Annotated[str | None, STORABLE] = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _one_source(self) -> VersionCreate:
        if (self.manifest is None) == (self.from_job is None):
            raise ValueError("give either manifest (an upload) or from_job, not both")
        if self.path and self.from_job is None:
            raise ValueError("path goes with from_job")
        return self


@router.get("/datasets", response_model=list[DatasetView])
def list_datasets(
    ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)], team: Team = None
) -> list[DatasetView]:
    """The datasets of your teams (every team's, for an admin)."""
    return datasets.list_datasets(ctx, who, team)


@router.get("/datasets/{name}", response_model=DatasetDetailView)
def show_dataset(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    team: Team = None,
) -> DatasetDetailView:
    """The dataset with its versions, newest first."""
    return datasets.show_dataset(ctx, who, name, team)


@router.get("/datasets/{name}/versions/{version}", response_model=DatasetVersionView)
def show_version(
    name: Name,
    version: Version,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    team: Team = None,
    files: Annotated[bool, Query(description="list the version's files")] = True,
) -> DatasetVersionView:
    """One version: its files (path, size, mode, SHA-256), bytes, blobs, who made it."""
    return datasets.show_version(ctx, who, name, version, team, files)


@router.put(
    "/dataset-blobs/{sha256}",
    response_model=BlobView,
    openapi_extra=BLOB_BODY,
    tags=["datasets"],
)
async def upload_blob(
    sha256: Sha256,
    request: Request,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.SUBMIT)],
    team: Team = None,
) -> BlobView:
    """Keep the body as the blob ``sha256`` for your team (``422 blob_hash_mismatch`` when
    its SHA-256 differs); acknowledged only once it is on the disk. ``413
    dataset_too_large`` past GPUPOOL_MAX_DATASET_BYTES. A body sent with
    ``Content-Encoding: gzip`` (a manifest: it shrinks by half) is the blob gzipped."""
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else None
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise InvalidRequest(f"Content-Encoding {encoding[:40]} is not taken: send gzip or none")
    size = await datasets.receive_blob(
        ctx, who, team, sha256, request.stream(), declared, encoding == "gzip"
    )
    return BlobView(sha256=sha256, size=size)


@router.post("/datasets/{name}/uploads", response_model=UploadPlanView)
def plan_upload(
    name: Name,
    body: UploadAsk,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
) -> UploadPlanView:
    """Check the manifest (``422 bad_manifest`` for a path outside the version, twice, or
    below a file; ``413 dataset_too_large`` past the limits) and answer which of its blobs
    your team lacks: upload only those."""
    asked = datasets.NewVersion(name=name, manifest=body.manifest, team=body.team)
    return datasets.plan(ctx, who, asked)


@router.post(
    "/datasets/{name}/versions",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetVersionView,
)
async def create_version(
    name: Name,
    body: VersionCreate,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
) -> DatasetVersionView:
    """Record the dataset's next version (the dataset is made with its first): from an
    uploaded manifest (``409 blobs_missing`` naming the blobs your team has not uploaded),
    or from a job's outputs, copied on the server (the job must have ended: ``409
    job_not_ended``)."""
    if body.from_job is not None:
        made = datasets.FromJob(
            name=name,
            job_id=body.from_job,
            path=body.path,
            team=body.team,
            description=body.description,
        )
        return await asyncio.to_thread(datasets.from_job, ctx, who, made)
    asked = datasets.NewVersion(
        name=name, manifest=body.manifest or "", team=body.team, description=body.description
    )
    return await asyncio.to_thread(datasets.commit, ctx, who, asked)


@router.delete("/datasets/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_dataset(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> Response:
    """Delete the dataset and every version (``409 dataset_in_use`` with the ids of the jobs
    that have not ended and use one)."""
    datasets.delete_dataset(ctx, who, name, None, team)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete("/datasets/{name}/versions/{version}", status_code=status.HTTP_204_NO_CONTENT)
def delete_version(
    name: Name,
    version: Version,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> Response:
    """Delete one version (``409 dataset_in_use`` while a job that has not ended uses it)."""
    datasets.delete_dataset(ctx, who, name, version, team)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# -- volumes -------------------------------------------------------------------------------------


class VolumeCreate(Strict):
    """A new, empty volume of a team: a directory its jobs mount read-write."""

    name: Annotated[str, STORABLE] = Field(max_length=100, description="the volume's name")
    team: Annotated[str | None, STORABLE] = Field(
        default=None, max_length=100, description="the team (default: your only one)"
    )
    size_bytes: int | None = Field(
        default=None, ge=1, le=2**62, description="its size as said (the team's quota binds)"
    )


@router.get("/volumes", response_model=list[VolumeView])
def list_volumes(
    ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)], team: Team = None
) -> list[VolumeView]:
    """The volumes of your teams (every team's, for an admin)."""
    return datasets.list_volumes(ctx, who, team)


@router.post("/volumes", status_code=status.HTTP_201_CREATED, response_model=VolumeView)
def create_volume(
    body: VolumeCreate, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> VolumeView:
    """Make a volume of your team (``409 volume_exists`` when it has one of that name); a
    job mounts it with ``volumes: ["NAME:/MOUNT"]`` (gpupool run --volume NAME:/mnt)."""
    return datasets.create_volume(ctx, who, body.name, body.team, body.size_bytes)


@router.get("/volumes/{name}", response_model=VolumeView)
def show_volume(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    team: Team = None,
) -> VolumeView:
    """The volume, with the bytes its files take now."""
    return datasets.show_volume(ctx, who, name, team)


@router.delete("/volumes/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_volume(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> Response:
    """Delete the volume and its files (``409 volume_in_use`` while a job that has not
    ended mounts it)."""
    datasets.delete_volume(ctx, who, name, team)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
