"""Experiments: hyper-parameter searches whose trials are jobs of the team
(``gpupool experiment``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.experiments import (
    ExperimentDetailView,
    ExperimentSpec,
    ExperimentView,
)
from gpupool.services import experiments
from gpupool.services.core import Principal

router = APIRouter(prefix="/experiments", tags=["experiments"])

Ref = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        description="the experiment's id, or its name (the newest of that name in your teams)",
    ),
]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ExperimentView)
def create(
    body: ExperimentSpec, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> ExperimentView:
    """Start a search: its first ``max_concurrent`` trials are queued at once as jobs of the
    team. ``422`` names a field of the trial's job that a submit would refuse (checked with
    a point of the space); ``409`` when the team runs an experiment of that name."""
    return experiments.create(ctx, who, body)


@router.get("", response_model=list[ExperimentView])
def list_experiments(
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.SIGNED_IN)],
    all: Annotated[bool, Query(description="ended ones too")] = True,  # noqa: A002
) -> list[ExperimentView]:
    """The experiments of your teams, newest first (every team's, for an admin)."""
    return experiments.list_experiments(ctx, who, include_ended=all)


@router.get("/{ref}", response_model=ExperimentDetailView)
def show(
    ref: Ref, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_READ)]
) -> ExperimentDetailView:
    """The experiment with its trials: each one's point, job, state, rung and objective."""
    return experiments.show(ctx, who, ref)


@router.post("/{ref}/pause", response_model=ExperimentView)
def pause(
    ref: Ref, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> ExperimentView:
    """Ask for no new trials; the running ones go on and are still judged at their rungs."""
    return experiments.pause(ctx, who, ref)


@router.post("/{ref}/resume", response_model=ExperimentView)
def resume(
    ref: Ref, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> ExperimentView:
    """Ask for trials again."""
    return experiments.resume(ctx, who, ref)


@router.post("/{ref}/stop", response_model=ExperimentView)
def stop(
    ref: Ref, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> ExperimentView:
    """End the experiment: its trials that have not ended are cancelled."""
    return experiments.stop(ctx, who, ref)
