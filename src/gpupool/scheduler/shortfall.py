"""Why a demand does not fit a capacity: the first resource short, with the best figure.

The same analysis serves the free capacity at the end of a cycle (why a job waits) and the
capacity of empty nodes (whether a job could ever run). Work is shared between demands of
one GPU shape: the nodes that fit the GPU part are summarised once as a ``HostFrontier``,
after which the CPU and memory check of each demand is a bisection.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain.jobs import Reason
from gpupool.scheduler.capacity import FreeCapacity, GpuState, NodeState
from gpupool.scheduler.fit import (
    CPU_EPSILON,
    Demand,
    cpus_fit,
    fraction_demand,
    fraction_fits,
    least_fraction_share,
    share_fits,
    whole_gpus_on,
)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """The resource that is short and the most of it anywhere (``node``: where)."""

    code: Reason
    node: str | None = None
    count: int = 0  # whole GPUs: the largest block
    share: float = 0.0  # fractions: the GPU's free share
    memory: int = 0  # fractions: the GPU's free memory; host memory: the node's
    cpus: float = 0.0


class HostFrontier:
    """Nodes by free CPUs (most first), with the most free memory among each prefix."""

    def __init__(self, nodes: Sequence[NodeState]):
        self._nodes = sorted(nodes, key=lambda node: (-node.cpus, node.rank))
        self._neg_cpus = [-node.cpus for node in self._nodes]
        self._most_memory: list[NodeState] = []
        for node in self._nodes:
            best = self._most_memory[-1] if self._most_memory else node
            if (node.memory_bytes, -node.rank) > (best.memory_bytes, -best.rank):
                best = node
            self._most_memory.append(best)

    def shortfall(self, cpus: float, memory: int) -> Shortfall | None:
        top = self._nodes[0]
        if not cpus_fit(top.cpus, cpus):
            return Shortfall(Reason.INSUFFICIENT_CPU, top.name, cpus=top.cpus)
        enough = bisect_right(self._neg_cpus, -(cpus - CPU_EPSILON))
        best = self._most_memory[enough - 1]
        if best.memory_bytes < memory:
            return Shortfall(Reason.INSUFFICIENT_MEMORY, best.name, memory=best.memory_bytes)
        return None


@dataclass(frozen=True, slots=True)
class GpuPart:
    """For one GPU shape: the nodes its GPU part fits, or why it fits none."""

    frontier: HostFrontier | None
    shortfall: Shortfall | None


class ShortfallFinder:
    """Finds the shortfall of demands against one capacity, reusing work between them."""

    def __init__(self, capacity: FreeCapacity):
        self._capacity = capacity
        self._gpu_parts: dict[tuple[float, int | None], GpuPart] = {}
        self._found: dict[Demand, Shortfall | None] = {}

    def find(self, demand: Demand) -> Shortfall | None:
        """The shortfall of ``demand``, or None if it fits (``capacity.nodes`` not empty)."""
        if demand not in self._found:
            self._found[demand] = self._find(demand)
        return self._found[demand]

    def _find(self, demand: Demand) -> Shortfall | None:
        part = self._gpu_part(demand)
        if part.frontier is None:
            return part.shortfall
        return part.frontier.shortfall(demand.cpus, demand.memory)

    def _gpu_part(self, demand: Demand) -> GpuPart:
        key = (demand.gpus, demand.gpu_memory)
        if key not in self._gpu_parts:
            self._gpu_parts[key] = self._analyse_gpus(demand)
        return self._gpu_parts[key]

    def _analyse_gpus(self, demand: Demand) -> GpuPart:
        if demand.whole:
            return whole_gpu_part(self._capacity, demand)
        if demand.fractional:
            return fraction_gpu_part(self._capacity, demand)
        return GpuPart(HostFrontier(self._capacity.nodes), None)


def whole_gpu_part(capacity: FreeCapacity, demand: Demand) -> GpuPart:
    """The nodes with enough free whole GPUs, else the largest free block (earliest node)."""
    fitting: list[NodeState] = []
    best: tuple[int, int] = (0, 0)  # (count, -rank)
    for node in capacity.nodes_by_free_count(1):
        count = node.free_count
        if demand.gpu_memory is not None:
            count = len(whole_gpus_on(node, demand))
        if count >= demand.whole:
            fitting.append(node)
        best = max(best, (count, -node.rank))
    if fitting:
        return GpuPart(HostFrontier(fitting), None)
    count, rank = best
    node = capacity.nodes[-rank].name if count else None
    return GpuPart(None, Shortfall(Reason.INSUFFICIENT_GPUS, node, count=count))


def fraction_gpu_part(capacity: FreeCapacity, demand: Demand) -> GpuPart:
    """The nodes with a GPU the fraction fits, else the GPU with the most room."""
    ranks = _fraction_ranks(capacity, demand)
    if ranks:
        return GpuPart(HostFrontier([capacity.nodes[rank] for rank in sorted(ranks)]), None)
    return GpuPart(None, _fraction_shortfall(capacity, demand))


def _fraction_ranks(capacity: FreeCapacity, demand: Demand) -> set[int]:
    """The ranks of the nodes with a free or partly used GPU the fraction fits."""
    ranks: set[int] = set()
    for node in capacity.nodes_by_free_count(1):
        if any(gpu.free and _fits(gpu, demand) for gpu in node.gpus):
            ranks.add(node.rank)
    for gpu in capacity.shared_from(least_fraction_share(demand, capacity.max_gpu_memory)):
        if gpu.rank not in ranks and _fits(gpu, demand):
            ranks.add(gpu.rank)
    return ranks


def _fits(gpu: GpuState, demand: Demand) -> bool:
    share, memory = fraction_demand(demand, gpu)
    return fraction_fits(gpu, share, memory)


def _fraction_shortfall(capacity: FreeCapacity, demand: Demand) -> Shortfall:
    """No GPU fits: the most free memory where the share fits, else the most free share."""
    least = least_fraction_share(demand, capacity.max_gpu_memory)
    roomy = [gpu for node in capacity.nodes_by_free_count(1) for gpu in node.gpus if gpu.free]
    roomy += [
        gpu
        for gpu in capacity.shared_from(least)
        if share_fits(gpu, fraction_demand(demand, gpu)[0])
    ]
    if roomy:
        best = max(roomy, key=lambda gpu: (gpu.free_memory, gpu.free_share, -gpu.rank))
        return _gpu_shortfall(Reason.INSUFFICIENT_GPU_MEMORY, capacity, best)
    return _gpu_shortfall(Reason.INSUFFICIENT_GPUS, capacity, _most_free_share(capacity))


def _most_free_share(capacity: FreeCapacity) -> GpuState | None:
    """The partly used GPU with the most free share, then memory; else any GPU, or None."""
    if capacity.shared:
        best = max(capacity.shared, key=lambda key: (key[0], key[1], -key[2], -key[3]))
        return capacity.gpu_at(best)
    return next((gpu for node in capacity.nodes for gpu in node.gpus), None)


def _gpu_shortfall(code: Reason, capacity: FreeCapacity, gpu: GpuState | None) -> Shortfall:
    if gpu is None:
        return Shortfall(code)
    node = capacity.nodes[gpu.rank].name
    return Shortfall(code, node, share=gpu.free_share, memory=gpu.free_memory)
