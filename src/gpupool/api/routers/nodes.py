"""Nodes: inventory, who holds each GPU, and an admin's drain, undrain and removal."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.api.schemas import NodeDrain
from gpupool.domain.views import NodeDetailView, NodeRemovedView, NodeView
from gpupool.services import cluster
from gpupool.services.core import Principal

router = APIRouter(prefix="/nodes", tags=["nodes"])
SignedIn = Annotated[Principal, allow(Rule.SIGNED_IN)]
Admin = Annotated[Principal, allow(Rule.ADMIN)]


@router.get("", response_model=list[NodeView])
def list_nodes(ctx: PlatformDep, who: SignedIn) -> list[NodeView]:
    """Every node and who holds each GPU; another team's job shows only what it holds."""
    return cluster.list_nodes(ctx, who)


@router.get("/{name}", response_model=NodeDetailView)
def show_node(name: str, ctx: PlatformDep, who: SignedIn) -> NodeDetailView:
    """One node, with its latest changes; another team's job shows only what it holds."""
    return cluster.show_node(ctx, who, name)


@router.post("/{name}/drain", response_model=NodeView)
def drain_node(name: str, ctx: PlatformDep, who: Admin, body: NodeDrain | None = None) -> NodeView:
    """Keep new work off a node (for maintenance): nothing new is placed there, what runs
    there goes on to its end. Draining a drained node sets its reason."""
    return cluster.drain(ctx, who, name, body.reason if body else None)


@router.post("/{name}/undrain", response_model=NodeView)
def undrain_node(name: str, ctx: PlatformDep, who: Admin) -> NodeView:
    """Let new work on a drained node again; a removed node may join again."""
    return cluster.undrain(ctx, who, name)


@router.delete("/{name}", response_model=NodeRemovedView)
def remove_node(name: str, ctx: PlatformDep, who: Admin) -> NodeRemovedView:
    """Take a node out of the pool: it stays out, its joiner refused, until an admin lets
    it back with undrain. Refused with 409
    node_busy, naming the jobs, while jobs hold resources on it and it is up; with 409
    own_node for the server's own node."""
    return cluster.remove(ctx, who, name)
