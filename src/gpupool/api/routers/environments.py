"""Python environments: a team's locked sets of packages, resolved once, built on each node."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.environments import (
    EnvironmentCreate,
    EnvironmentDetailView,
    EnvironmentRegister,
    EnvironmentVersionView,
    EnvironmentView,
)
from gpupool.services import environments
from gpupool.services.core import Principal

router = APIRouter(prefix="/environments", tags=["environments"])

Ref = Annotated[
    str, Path(max_length=200, description="NAME, or NAME@ID (an id, or 8 or more of its digits)")
]
Team = Annotated[
    str | None,
    Query(max_length=100, description="the environment's team, when several of yours have one"),
]


@router.get("", response_model=list[EnvironmentView])
def list_environments(
    ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)], team: Team = None
) -> list[EnvironmentView]:
    """The environments of your teams, and those registered for every team (every team's,
    for an admin), each with its newest version."""
    return environments.list_environments(ctx, who, team)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=EnvironmentVersionView)
def create(
    body: EnvironmentCreate, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> EnvironmentVersionView:
    """A version of an environment of your team, from a requirements file, a pyproject.toml's
    dependencies or a uv.lock: resolved now against the site's package index, every package
    pinned with its hashes. The same packages resolved the same way give the same version
    (its id is the digest of its lock, Python and platform). ``422 invalid_environment``: an
    option, URL or path among the packages; ``422 environment_unresolvable``: uv could not
    resolve them (its message says why); ``422 python_unavailable``: no such Python here."""
    return environments.create(ctx, who, body)


@router.post(
    "/prefixes", status_code=status.HTTP_201_CREATED, response_model=EnvironmentVersionView
)
def register(
    body: EnvironmentRegister, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.ADMIN)]
) -> EnvironmentVersionView:
    """An existing prefix on every node (a conda environment, a module tree) as an environment
    of a team, or of every team: jobs get its bin/ first on PATH, read-only. Admins only."""
    return environments.register(ctx, who, body)


@router.get("/{ref}", response_model=EnvironmentDetailView | EnvironmentVersionView)
def show(
    ref: Ref, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_READ)], team: Team = None
) -> EnvironmentDetailView | EnvironmentVersionView:
    """``NAME``: the environment and its versions, newest first; ``NAME@ID``: that version,
    with its lock."""
    return environments.show(ctx, who, ref, team)


@router.delete("/{ref}", response_model=list[str])
def remove(
    ref: Ref, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)], team: Team = None
) -> list[str]:
    """Remove the version ``NAME@ID``, or the environment ``NAME`` and all its versions; the
    ids removed. ``409 environment_in_use`` while a pending or running job uses one."""
    return environments.remove(ctx, who, ref, team)
