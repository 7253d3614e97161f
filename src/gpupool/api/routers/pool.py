"""The pool as the nodes page shows it: a summary, and its nodes by fabric group."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.views import PoolView
from gpupool.services import cluster
from gpupool.services.core import Principal

router = APIRouter(prefix="/pool", tags=["nodes"])


@router.get("", response_model=PoolView)
def show_pool(ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)]) -> PoolView:
    """Nodes up, drained and down, GPUs in use and free by model (a drained or down node's
    GPUs are not free), and every node by fabric group with its GPUs, topology matrix, NICs
    and what its jobs hold; another team's job shows only what it holds."""
    return cluster.show_pool(ctx, who)
