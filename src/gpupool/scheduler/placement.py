"""Phase 3: where one demand goes, if anywhere (best fit), and taking it from capacity.

* Whole GPUs: the node with the fewest free whole GPUs that still has enough (ties: name);
  the GPUs in index order, all on that one node.
* A fraction (or GPU memory alone): first the partly used GPU with the least free share that
  still fits, then the least free memory; else a free GPU on the node with the fewest free
  GPUs, so whole GPUs stay free for whole-GPU jobs.
* No GPUs: the node with the fewest free GPUs whose CPUs and memory fit.
"""

from __future__ import annotations

from gpupool.scheduler.capacity import Claim, FreeCapacity
from gpupool.scheduler.fit import (
    Demand,
    fraction_demand,
    fraction_fits,
    host_fits,
    least_fraction_share,
    whole_gpus_on,
)
from gpupool.scheduler.types import GpuShare


def find_spot(demand: Demand, capacity: FreeCapacity) -> Claim | None:
    """The best spot for ``demand`` in the free capacity, or None when it fits nowhere."""
    if demand.whole:
        return _whole_spot(demand, capacity)
    if demand.fractional:
        return _shared_spot(demand, capacity) or _fresh_spot(demand, capacity)
    return _host_spot(demand, capacity)


def take_spot(claim: Claim, demand: Demand, capacity: FreeCapacity) -> tuple[GpuShare, ...]:
    """Subtract the claim from capacity; the GPU shares it holds, for the placement."""
    capacity.take(claim, demand.cpus, demand.memory)
    return tuple([GpuShare(gpu.uuid, share, memory) for gpu, share, memory in claim.parts])


def _whole_spot(demand: Demand, capacity: FreeCapacity) -> Claim | None:
    wanted = demand.whole
    if wanted > capacity.largest_free_block():
        return None
    for node in capacity.nodes_by_free_count(wanted):
        if not host_fits(node, demand):
            continue
        gpus = whole_gpus_on(node, demand)
        if len(gpus) >= wanted:
            parts = tuple([(gpu, 1.0, gpu.memory_bytes) for gpu in gpus[:wanted]])
            return Claim(node, parts)
    return None


def _shared_spot(demand: Demand, capacity: FreeCapacity) -> Claim | None:
    least = least_fraction_share(demand, capacity.max_gpu_memory)
    for gpu in capacity.shared_from(least):
        share, memory = fraction_demand(demand, gpu)
        if not fraction_fits(gpu, share, memory):
            continue
        node = capacity.nodes[gpu.rank]
        if host_fits(node, demand):
            return Claim(node, ((gpu, share, memory),))
    return None


def _fresh_spot(demand: Demand, capacity: FreeCapacity) -> Claim | None:
    for node in capacity.nodes_by_free_count(1):
        if not host_fits(node, demand):
            continue
        for gpu in node.gpus:
            if not gpu.free:
                continue
            share, memory = fraction_demand(demand, gpu)
            if fraction_fits(gpu, share, memory):
                return Claim(node, ((gpu, share, memory),))
    return None


def _host_spot(demand: Demand, capacity: FreeCapacity) -> Claim | None:
    for node in capacity.nodes_by_free_count(0):
        if host_fits(node, demand):
            return Claim(node, ())
    return None
