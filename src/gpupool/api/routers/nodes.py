"""Nodes: inventory, and who holds each GPU."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.views import NodeView
from gpupool.services import nodes
from gpupool.services.access import Principal

router = APIRouter(prefix="/nodes", tags=["nodes"])


@router.get("", response_model=list[NodeView])
def list_nodes(
    ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)]
) -> list[NodeView]:
    """Every node and who holds each GPU; another team's job shows only what it holds."""
    return nodes.list_nodes(ctx, who)


@router.get("/{name}", response_model=NodeView)
def show_node(
    name: str, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)]
) -> NodeView:
    """One node; another team's job shows only what it holds."""
    return nodes.show_node(ctx, who, name)
