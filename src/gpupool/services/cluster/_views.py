"""Nodes' rows and inventories turned into read models (``gpupool.domain.views``).

Each function reads only what its row has loaded or can load, so services call them while
their transaction is open; what they return holds no row and loads nothing later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.fabric import natural_key
from gpupool.domain.inventory import GpuLink, LinkKind, NodeInventory
from gpupool.domain.nodes import NodeState
from gpupool.domain.topology import gpu_domains
from gpupool.domain.views import (
    CpuHolderView,
    GpuView,
    HolderView,
    NodeEventView,
    NodeUsageView,
    NodeView,
    TopologyView,
)
from gpupool.store.models import NodeEventModel, NodeModel


@dataclass(frozen=True)
class HostHeld:
    """The CPUs and host memory that a node's starting and running jobs hold."""

    cpus: float = 0.0
    memory_bytes: int = 0
    holders: tuple[CpuHolderView, ...] = ()  # who holds them, most CPUs first


def node_view(
    node: NodeModel, held: Mapping[str, Sequence[HolderView]], host: HostHeld
) -> NodeView:
    """A node, who holds each of its GPUs (``held``: GPU UUID -> holders) and what its jobs
    hold of it (``host``: CPUs and memory)."""
    inventory = NodeInventory.model_validate(node.inventory)
    gpus = _gpu_views(inventory, held)
    return NodeView(
        name=node.name,
        schedulable=node.schedulable,
        state=NodeState(node.state),
        drain=node.drain,
        drain_reason=node.drain_reason,
        joined_at=node.joined_at,
        down_at=node.down_at,
        address=node.address,
        fabric_group=node.fabric_group,
        last_seen_at=node.last_seen_at,
        cpus=inventory.cpus,
        memory_bytes=inventory.memory_bytes,
        gpus=gpus,
        inventory=inventory,
        usage=usage_view(inventory, gpus, host),
        topology=topology_view(inventory),
        cpu_holders=list(host.holders),
    )


def usage_view(inventory: NodeInventory, gpus: Sequence[GpuView], host: HostHeld) -> NodeUsageView:
    """What a node's jobs hold of its GPUs, CPUs and memory, and each as a share."""
    gpus_held = round(sum(gpu.used_share for gpu in gpus), 6)
    return NodeUsageView(
        gpus_held=gpus_held,
        gpus=len(gpus),
        gpu_share=_share(gpus_held, len(gpus)),
        cpus_held=round(host.cpus, 6),
        cpus=inventory.cpus,
        cpu_share=_share(host.cpus, inventory.cpus),
        memory_held_bytes=host.memory_bytes,
        memory_bytes=inventory.memory_bytes,
        memory_share=_share(host.memory_bytes, inventory.memory_bytes),
    )


def topology_view(inventory: NodeInventory) -> TopologyView:
    """The node's ``nvidia-smi topo -m`` matrix from its inventory's links and each GPU's
    NIC affinity; a pair the inventory says nothing of is ''."""
    gpus = sorted(inventory.gpus, key=lambda gpu: gpu.index)
    indexes = [gpu.index for gpu in gpus]
    nics = sorted({name for gpu in gpus for name in gpu.nic_affinity}, key=natural_key)
    labels = _link_labels(inventory.links)
    cells = [
        ["X" if a == b else labels.get((a, b), "") for b in indexes]
        + [gpu.nic_affinity[nic].value if nic in gpu.nic_affinity else "" for nic in nics]
        for a, gpu in zip(indexes, gpus, strict=True)
    ]
    reported = bool(labels) or bool(nics)
    return TopologyView(gpus=indexes, nics=nics, cells=cells, reported=reported)


def node_event_view(event: NodeEventModel) -> NodeEventView:
    return NodeEventView(at=event.at, reason=event.reason, message=event.message, actor=event.actor)


def _gpu_views(inventory: NodeInventory, held: Mapping[str, Sequence[HolderView]]) -> list[GpuView]:
    utilization = {g.uuid: g.utilization_percent for g in inventory.gpus}
    domains = gpu_domains(inventory.gpus, inventory.links)
    gpus = []
    for gpu in inventory.schedulable_gpus():
        holders = list(held.get(gpu.uuid, ()))
        gpus.append(
            GpuView(
                uuid=gpu.uuid,
                index=gpu.index,
                model=gpu.model,
                memory_bytes=gpu.memory_bytes,
                used_share=round(sum(h.share for h in holders), 6),
                used_memory_bytes=sum(h.memory_bytes for h in holders),
                utilization_percent=utilization.get(gpu.uuid),
                holders=holders,
                domain=domains.get(gpu.index, gpu.index),
            )
        )
    return gpus


def _share(held: float, offered: float) -> float:
    return round(held / offered, 6) if offered > 0 else 0.0


def _link_labels(links: Sequence[GpuLink]) -> dict[tuple[int, int], str]:
    """(a, b) and (b, a) -> the best link between GPUs a and b, as topo -m writes it."""
    order = list(LinkKind)  # fastest first
    best: dict[tuple[int, int], GpuLink] = {}
    for link in links:
        for pair in ((link.a, link.b), (link.b, link.a)):
            kept = best.get(pair)
            if kept is None or order.index(link.kind) < order.index(kept.kind):
                best[pair] = link
    return {pair: _link_label(link) for pair, link in best.items()}


def _link_label(link: GpuLink) -> str:
    """NV4 for four NVLinks (NV where the count is unknown); else the kind's name."""
    if link.kind is LinkKind.NVLINK:
        return f"NV{link.nvlinks}" if link.nvlinks else "NV"
    return link.kind.value
