"""Phase 3: where one request goes, if anywhere (best fit), and taking it from capacity.

* Whole GPUs: the node with the fewest free whole GPUs that still has enough (ties: name);
  the GPUs in index order, all on that one node.
* A fraction (or GPU memory alone): first the partly used GPU with the least free share that
  still fits, then the least free memory; else a free GPU on the node with the fewest free
  GPUs, so whole GPUs stay free for whole-GPU jobs.
* No GPUs: the node with the fewest free GPUs whose CPUs and memory fit.
"""

from __future__ import annotations

from gpupool.domain.jobs import ResourceRequest
from gpupool.scheduler.capacity import Claim, FreeCapacity
from gpupool.scheduler.fit import (
    fraction_demand,
    gpu_memory_fits,
    host_fits,
    host_memory,
    least_fraction_share,
    share_fits,
    whole_gpus_on,
)
from gpupool.scheduler.types import GpuShare


def find_spot(request: ResourceRequest, capacity: FreeCapacity) -> Claim | None:
    """The best spot for ``request`` in the free capacity, or None when it fits nowhere."""
    if request.whole_gpus:
        return _whole_spot(request, capacity)
    if request.is_fractional:
        return _shared_spot(request, capacity) or _fresh_spot(request, capacity)
    return _host_spot(request, capacity)


def take_spot(
    claim: Claim, request: ResourceRequest, capacity: FreeCapacity
) -> tuple[GpuShare, ...]:
    """Subtract the claim from capacity; the GPU shares it holds, for the placement."""
    capacity.take(claim, request.cpus, host_memory(request))
    return tuple(GpuShare(gpu.uuid, share, memory) for gpu, share, memory in claim.parts)


def _whole_spot(request: ResourceRequest, capacity: FreeCapacity) -> Claim | None:
    wanted = request.whole_gpus
    if wanted > capacity.largest_free_block():
        return None
    for node in capacity.nodes_by_free_count(wanted):
        if not host_fits(node, request):
            continue
        gpus = whole_gpus_on(node, request)
        if len(gpus) >= wanted:
            parts = tuple((gpu, 1.0, gpu.memory_bytes) for gpu in gpus[:wanted])
            return Claim(node, parts)
    return None


def _shared_spot(request: ResourceRequest, capacity: FreeCapacity) -> Claim | None:
    least = least_fraction_share(request, capacity.max_gpu_memory)
    for gpu in capacity.shared_from(least):
        share, memory = fraction_demand(request, gpu)
        if not (share_fits(gpu, share) and gpu_memory_fits(gpu, memory)):
            continue
        node = capacity.nodes[gpu.rank]
        if host_fits(node, request):
            return Claim(node, ((gpu, share, memory),))
    return None


def _fresh_spot(request: ResourceRequest, capacity: FreeCapacity) -> Claim | None:
    for node in capacity.nodes_by_free_count(1):
        if not host_fits(node, request):
            continue
        for gpu in node.gpus:
            if not gpu.is_free:
                continue
            share, memory = fraction_demand(request, gpu)
            if share_fits(gpu, share) and gpu_memory_fits(gpu, memory):
                return Claim(node, ((gpu, share, memory),))
    return None


def _host_spot(request: ResourceRequest, capacity: FreeCapacity) -> Claim | None:
    for node in capacity.nodes_by_free_count(0):
        if host_fits(node, request):
            return Claim(node, ())
    return None
