"""The model registry: models of teams, their numbered versions, registered from jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status
from pydantic import Field

from gpupool.api.access import Rule, allow
from gpupool.api.deps import MAX_ID, PlatformDep
from gpupool.api.schemas import Strict
from gpupool.domain.models import ModelDetailView, ModelVersionView, ModelView
from gpupool.domain.text import STORABLE
from gpupool.services import models
from gpupool.services.core import Principal

router = APIRouter(prefix="/models", tags=["models"])

Name = Annotated[str, Path(max_length=100, description="the model's name")]
Version = Annotated[int, Path(ge=1, le=MAX_ID, description="a version's number")]
Team = Annotated[
    str | None,
    Query(max_length=100, description="the model's team, when several of yours have one"),
]


class ModelRegister(Strict):
    """A new version of a model, from the outputs of a job that ended."""

    job_id: int = Field(ge=1, le=MAX_ID, description="the job whose outputs the version holds")
    path: Annotated[str, STORABLE] = Field(
        default="",
        max_length=4096,
        description="a file or directory inside the job's outputs ('': all of them)",
    )
    team: Annotated[str | None, STORABLE] = Field(
        default=None, max_length=100, description="the job's team (a check; it is the model's)"
    )
    description: Annotated[str | None, STORABLE] = Field(default=None, max_length=2000)
    allow_failed: bool = Field(
        default=False, description="take the outputs of a job that ended without succeeding"
    )


@router.get("", response_model=list[ModelView])
def list_models(
    ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)], team: Team = None
) -> list[ModelView]:
    """The models of your teams (every team's, for an admin)."""
    return models.list_models(ctx, who, team)


@router.get("/{name}", response_model=ModelDetailView)
def show_model(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    team: Team = None,
) -> ModelDetailView:
    """The model with its versions, newest first."""
    return models.show_model(ctx, who, name, team)


@router.post(
    "/{name}/versions", status_code=status.HTTP_201_CREATED, response_model=ModelVersionView
)
def register(
    name: Name,
    body: ModelRegister,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
) -> ModelVersionView:
    """Record a new version of the model (made when it has none) from the job's outputs: its
    files are copied into the model store with their SHA-256; the job, its spec and its final
    metrics are remembered. The job must have ended (``409 job_not_ended``), and succeeded
    unless ``allow_failed`` (``409 job_not_succeeded``); ``422 bad_model_path`` for a path
    outside the outputs, a link leading outside them or a special file."""
    asked = models.Registration(
        name=name,
        job_id=body.job_id,
        path=body.path,
        team=body.team,
        description=body.description,
        allow_failed=body.allow_failed,
    )
    return models.register(ctx, who, asked)


@router.get("/{name}/versions/{version}", response_model=ModelVersionView)
def show_version(
    name: Name,
    version: Version,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    team: Team = None,
) -> ModelVersionView:
    """One version: its files with sizes and checksums, source job, spec and metrics."""
    return models.show_version(ctx, who, name, version, team)
