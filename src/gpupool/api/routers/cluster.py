"""The pool's engine: its health, and joining it (``gpupool node join``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import Field

from gpupool.api.access import Rule, allow, declare
from gpupool.api.deps import PlatformDep, client_address
from gpupool.api.schemas import Strict
from gpupool.domain.text import Text
from gpupool.domain.views import ClusterView, JoinView
from gpupool.services import cluster
from gpupool.services.core import Principal

router = APIRouter(prefix="/cluster", tags=["cluster"])


class JoinIn(Strict):
    token: Text = Field(min_length=1, max_length=200, description="the pool's join token")
    name: Text | None = Field(
        default=None, max_length=200, description="a joining node's name: say whether it is up"
    )


@router.get("", response_model=ClusterView)
def show_cluster(ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)]) -> ClusterView:
    """One machine or a Ray pool, and whether the pool's head answers; admins also get the
    head's address and the command that joins a machine."""
    return cluster.describe(ctx, who)


@router.post("/join", response_model=JoinView)
@declare(Rule.PUBLIC)
def join(body: JoinIn, request: Request, ctx: PlatformDep) -> JoinView:
    """For the pool's join token: the Ray head's address and the pool's Ray secret. Wrong
    tokens are throttled per address like failed sign-ins."""
    return cluster.join(ctx, client_address(request), body.token, body.name)
