"""Why a request does not fit a capacity: the first resource short, with the best figure.

The same analysis serves the free capacity at the end of a cycle (why a job waits) and the
capacity of empty nodes (whether a job could ever run). Work is shared between requests of
one GPU shape: the nodes that fit the GPU part are summarised once as a ``HostFrontier``,
after which the CPU and memory check of each request is a bisection.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.scheduler.capacity import FreeCapacity, GpuState, NodeState
from gpupool.scheduler.fit import (
    CPU_EPSILON,
    ShapeKey,
    cpus_fit,
    fraction_demand,
    gpu_count,
    gpu_memory_fits,
    host_memory,
    shape_key,
    share_fits,
    whole_fits,
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
    """Finds the shortfall of requests against one capacity, reusing work between them."""

    def __init__(self, capacity: FreeCapacity):
        self._capacity = capacity
        self._gpu_parts: dict[tuple[float, int | None], GpuPart] = {}
        self._found: dict[ShapeKey, Shortfall | None] = {}

    def find(self, request: ResourceRequest) -> Shortfall | None:
        """The shortfall of ``request``, or None if it fits (``capacity.nodes`` not empty)."""
        key = shape_key(request)
        if key not in self._found:
            self._found[key] = self._find(request)
        return self._found[key]

    def _find(self, request: ResourceRequest) -> Shortfall | None:
        part = self._gpu_part(request)
        if part.frontier is None:
            return part.shortfall
        return part.frontier.shortfall(request.cpus, host_memory(request))

    def _gpu_part(self, request: ResourceRequest) -> GpuPart:
        key = (gpu_count(request), request.gpu_memory_bytes)
        if key not in self._gpu_parts:
            self._gpu_parts[key] = self._analyse_gpus(request)
        return self._gpu_parts[key]

    def _analyse_gpus(self, request: ResourceRequest) -> GpuPart:
        if request.whole_gpus:
            return whole_gpu_part(self._capacity, request)
        if request.is_fractional:
            return fraction_gpu_part(self._capacity, request)
        return GpuPart(HostFrontier(self._capacity.nodes), None)


def whole_gpu_part(capacity: FreeCapacity, request: ResourceRequest) -> GpuPart:
    wanted = request.whole_gpus
    fitting: list[NodeState] = []
    best_count, best_node = 0, None
    for node in capacity.nodes:
        if request.gpu_memory_bytes is None:
            count = node.free_count
        else:
            count = sum(1 for gpu in node.gpus if whole_fits(gpu, request))
        if count >= wanted:
            fitting.append(node)
        if count > best_count:
            best_count, best_node = count, node.name
    if fitting:
        return GpuPart(HostFrontier(fitting), None)
    return GpuPart(None, Shortfall(Reason.INSUFFICIENT_GPUS, best_node, count=best_count))


def fraction_gpu_part(capacity: FreeCapacity, request: ResourceRequest) -> GpuPart:
    fitting: list[NodeState] = []
    most_share: GpuState | None = None  # the most free share, then memory
    most_memory: GpuState | None = None  # among GPUs whose share fits: the most free memory
    for node in capacity.nodes:
        node_fits = False
        for gpu in node.gpus:
            share, memory = fraction_demand(request, gpu)
            most_share = _more(most_share, gpu, by_share=True)
            if not share_fits(gpu, share):
                continue
            most_memory = _more(most_memory, gpu, by_share=False)
            node_fits = node_fits or gpu_memory_fits(gpu, memory)
        if node_fits:
            fitting.append(node)
    if fitting:
        return GpuPart(HostFrontier(fitting), None)
    if most_memory is not None:
        return GpuPart(None, _gpu_shortfall(Reason.INSUFFICIENT_GPU_MEMORY, capacity, most_memory))
    return GpuPart(None, _gpu_shortfall(Reason.INSUFFICIENT_GPUS, capacity, most_share))


def _more(best: GpuState | None, gpu: GpuState, by_share: bool) -> GpuState:
    """The GPU with more free room (earlier node and index on ties)."""
    if best is None:
        return gpu
    if by_share:
        gain = (gpu.free_share, gpu.free_memory) > (best.free_share, best.free_memory)
    else:
        gain = (gpu.free_memory, gpu.free_share) > (best.free_memory, best.free_share)
    return gpu if gain else best


def _gpu_shortfall(code: Reason, capacity: FreeCapacity, gpu: GpuState | None) -> Shortfall:
    if gpu is None:
        return Shortfall(code)
    node = capacity.nodes[gpu.rank].name
    return Shortfall(code, node, share=gpu.free_share, memory=gpu.free_memory)
