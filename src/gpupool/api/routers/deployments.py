"""Deployments: make, list, show, scale, update, stop; their keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from gpupool.api.access import Rule, allow
from gpupool.api.deps import Id, PlatformDep
from gpupool.domain.deployments import (
    NAME_PATTERN,
    DeploymentDetailView,
    DeploymentSpec,
    DeploymentView,
    KeyCreate,
    KeyCreatedView,
    KeyView,
    ScaleRequest,
    UpdateRequest,
)
from gpupool.services import deployments
from gpupool.services.core import Principal

router = APIRouter(prefix="/deployments", tags=["deployments"])
Name = Annotated[str, Path(max_length=100, pattern=NAME_PATTERN, description="its name")]
Team = Annotated[
    str | None,
    Query(
        max_length=100,
        description="its team: needed where several of your teams have a deployment of "
        "this name (else 409 ambiguous_deployment)",
    ),
]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=DeploymentDetailView)
def create(
    body: DeploymentSpec, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> DeploymentDetailView:
    """Deploy a model version (or a command) with replicas, served at /serve/NAME/ (and at
    /serve/NAME@TEAM/). A name is unique in its team: another team may use it too."""
    return deployments.create_deployment(ctx, who, body)


@router.get("", response_model=list[DeploymentView])
def list_deployments(
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.SIGNED_IN)],
    team: Annotated[str | None, Query(max_length=100)] = None,
    stopped: Annotated[bool, Query(description="the stopped ones too")] = False,
) -> list[DeploymentView]:
    """The deployments of your teams (every team's, for admins), by name."""
    return deployments.list_deployments(ctx, who, team, stopped)


@router.get("/{name}", response_model=DeploymentDetailView)
def show(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    team: Team = None,
) -> DeploymentDetailView:
    """The deployment with its replicas (why each waits, if it does), latest events and
    traffic."""
    return deployments.show_deployment(ctx, who, name, team)


@router.post("/{name}/scale", response_model=DeploymentView)
def scale(
    name: Name,
    body: ScaleRequest,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> DeploymentView:
    return deployments.scale_deployment(ctx, who, name, body.replicas, team)


@router.post("/{name}/update", response_model=DeploymentView)
def update(
    name: Name,
    body: UpdateRequest,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> DeploymentView:
    """Roll to another version of its model, replica by replica (the latest when left out)."""
    return deployments.update_deployment(ctx, who, name, body.version, team)


@router.post("/{name}/stop", response_model=DeploymentView)
def stop(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> DeploymentView:
    return deployments.stop_deployment(ctx, who, name, team)


@router.get("/{name}/keys", response_model=list[KeyView])
def list_keys(
    name: Name,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> list[KeyView]:
    return deployments.list_keys(ctx, who, name, team)


@router.post("/{name}/keys", status_code=status.HTTP_201_CREATED, response_model=KeyCreatedView)
def create_key(
    name: Name,
    body: KeyCreate,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> KeyCreatedView:
    """A key that may call this deployment's /serve address (shown once)."""
    return deployments.create_key(ctx, who, name, body.name, team)


@router.delete("/{name}/keys/{key_id}", response_model=KeyView)
def revoke_key(
    name: Name,
    key_id: Id,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
    team: Team = None,
) -> KeyView:
    return deployments.revoke_key(ctx, who, name, key_id, team)
