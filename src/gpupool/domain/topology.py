"""Connectivity domains: which GPUs of a node a multi-GPU task should get together.

The scheduler sees one number per GPU (``GpuCapacity.domain``) and places a multi-GPU task
inside one domain when a domain has enough free GPUs. A GPU's domain is the connected group
of the best link class it has (``nvidia-smi topo -m`` legend, fastest first):

1. **NVLink**: GPUs joined by NVLink, directly or through other GPUs (the connected
   component; behind NVSwitches every GPU reaches every other, so they form one domain).
2. **PCIe switch**: of the GPUs left, those behind one PCIe switch (``PIX``); then, of those
   still left, those under one tree of switches without a host bridge (``PXB``). Switches
   first, so two switches under a common one stay two domains.
3. **NUMA node**: of the GPUs left, those on one NUMA node (``numa_node``, or ``PHB`` and
   ``NODE`` links where the NUMA node is unknown).
4. A GPU left over is a domain of its own.

A node whose inventory says nothing about topology (no links, no NUMA node) is one domain:
there is nothing to prefer. A domain's number is the smallest GPU index in it; MIG instances
are in the domain of their physical GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpupool.domain.inventory import GpuDevice, GpuLink, LinkKind

TIERS: tuple[frozenset[LinkKind], ...] = (
    frozenset({LinkKind.NVLINK}),
    frozenset({LinkKind.PIX}),
    frozenset({LinkKind.PXB}),
    frozenset({LinkKind.PHB, LinkKind.NODE}),
)
NUMA_TIER = TIERS[-1]


def gpu_domains(gpus: Sequence[GpuDevice], links: Sequence[GpuLink]) -> dict[int, int]:
    """GPU index -> its connectivity domain (the smallest GPU index of its group)."""
    indexes = sorted({gpu.index for gpu in gpus})
    if not indexes:
        return {}
    if not links and all(gpu.numa_node is None for gpu in gpus):
        return dict.fromkeys(indexes, indexes[0])
    domains: dict[int, int] = {}
    left = set(indexes)
    for kinds in TIERS:
        edges = [(link.a, link.b) for link in links if link.kind in kinds]
        if kinds is NUMA_TIER:
            edges += _same_numa_node(gpus)
        for group in components(left, edges):
            if len(group) > 1:
                domains.update(dict.fromkeys(group, min(group)))
                left -= group
    domains.update((index, index) for index in left)
    return domains


def components(nodes: set[int], edges: Iterable[tuple[int, int]]) -> list[set[int]]:
    """The connected components of the graph on ``nodes`` (edges to other nodes ignored)."""
    parent = {node: node for node in nodes}

    def root(node: int) -> int:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in edges:
        if a in parent and b in parent:
            parent[root(a)] = root(b)
    groups: dict[int, set[int]] = {}
    for node in nodes:
        groups.setdefault(root(node), set()).add(node)
    return list(groups.values())


def _same_numa_node(gpus: Sequence[GpuDevice]) -> list[tuple[int, int]]:
    first_on: dict[int, int] = {}
    edges: list[tuple[int, int]] = []
    for gpu in gpus:
        if gpu.numa_node is not None:
            edges.append((first_on.setdefault(gpu.numa_node, gpu.index), gpu.index))
    return edges
