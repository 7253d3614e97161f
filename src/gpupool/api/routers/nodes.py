"""Nodes: inventory, and who holds each GPU."""

from __future__ import annotations

from fastapi import APIRouter

from gpupool.api.deps import PlatformDep, PrincipalDep
from gpupool.api.schemas import GpuOut, HolderOut, NodeOut
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.topology import gpu_domains
from gpupool.services import nodes
from gpupool.store.models import NodeModel

router = APIRouter(prefix="/nodes", tags=["nodes"])


@router.get("", response_model=list[NodeOut])
def list_nodes(ctx: PlatformDep, who: PrincipalDep) -> list[NodeOut]:
    """Every node and who holds each GPU; another team's job shows only what it holds."""
    with ctx.db.reader() as session:
        held = nodes.holders(session, who)
        return [node_out(node, held) for node in nodes.list_nodes(session)]


@router.get("/{name}", response_model=NodeOut)
def show_node(name: str, ctx: PlatformDep, who: PrincipalDep) -> NodeOut:
    """One node; another team's job shows only what it holds."""
    with ctx.db.reader() as session:
        return node_out(nodes.get_node(session, name), nodes.holders(session, who))


def node_out(node: NodeModel, held: dict[str, list[nodes.Holder]]) -> NodeOut:
    inventory = NodeInventory.model_validate(node.inventory)
    utilization = {g.uuid: g.utilization_percent for g in inventory.gpus}
    domains = gpu_domains(inventory.gpus, inventory.links)
    gpus = []
    for gpu in inventory.schedulable_gpus():
        holders = held.get(gpu.uuid, [])
        gpus.append(
            GpuOut(
                uuid=gpu.uuid,
                index=gpu.index,
                model=gpu.model,
                memory_bytes=gpu.memory_bytes,
                used_share=round(sum(h.share for h in holders), 6),
                used_memory_bytes=sum(h.memory_bytes for h in holders),
                utilization_percent=utilization.get(gpu.uuid),
                holders=[HolderOut(**h.__dict__) for h in holders],
                domain=domains.get(gpu.index, gpu.index),
            )
        )
    return NodeOut(
        name=node.name,
        schedulable=node.schedulable,
        last_seen_at=node.last_seen_at,
        cpus=inventory.cpus,
        memory_bytes=inventory.memory_bytes,
        gpus=gpus,
        inventory=inventory,
    )
