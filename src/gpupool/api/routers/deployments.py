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
from gpupool.services import deployment_access, deployments
from gpupool.services.access import Principal

router = APIRouter(prefix="/deployments", tags=["deployments"])
Name = Annotated[str, Path(max_length=100, pattern=NAME_PATTERN, description="its name")]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=DeploymentDetailView)
def create(
    body: DeploymentSpec, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> DeploymentDetailView:
    """Deploy a model version (or a command) with replicas, served at /serve/NAME/."""
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
    name: Name, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_READ)]
) -> DeploymentDetailView:
    """The deployment with its replicas, latest events and traffic."""
    return deployments.show_deployment(ctx, who, name)


@router.post("/{name}/scale", response_model=DeploymentView)
def scale(
    name: Name,
    body: ScaleRequest,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
) -> DeploymentView:
    return deployments.scale_deployment(ctx, who, name, body.replicas)


@router.post("/{name}/update", response_model=DeploymentView)
def update(
    name: Name,
    body: UpdateRequest,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
) -> DeploymentView:
    """Roll to another version of its model, replica by replica (the latest when left out)."""
    return deployments.update_deployment(ctx, who, name, body.version)


@router.post("/{name}/stop", response_model=DeploymentView)
def stop(
    name: Name, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> DeploymentView:
    return deployments.stop_deployment(ctx, who, name)


@router.get("/{name}/keys", response_model=list[KeyView])
def list_keys(
    name: Name, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> list[KeyView]:
    return deployment_access.list_keys(ctx, who, name)


@router.post("/{name}/keys", status_code=status.HTTP_201_CREATED, response_model=KeyCreatedView)
def create_key(
    name: Name,
    body: KeyCreate,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
) -> KeyCreatedView:
    """A key that may call this deployment's /serve address (shown once)."""
    return deployment_access.create_key(ctx, who, name, body.name)


@router.delete("/{name}/keys/{key_id}", response_model=KeyView)
def revoke_key(
    name: Name,
    key_id: Id,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_WRITE)],
) -> KeyView:
    return deployment_access.revoke_key(ctx, who, name, key_id)
