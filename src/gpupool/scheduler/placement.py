"""Phase 3: where one task goes, if anywhere (best fit), and taking it from capacity.

* Whole GPUs: the node with the fewest free whole GPUs that still has enough (ties: name).
  On that node, GPUs of one connectivity domain (NVLink or one PCIe switch) when a domain
  has enough free, the fullest such domain first (one GPU too); else the largest domains first.
* A fraction (or GPU memory alone): first the partly used GPU with the least free share that
  still fits, then the least free memory; else a free GPU on the node with the fewest free
  GPUs, in its fullest domain, so whole GPUs and domains stay free for whole-GPU jobs.
* No GPUs: the node with the fewest free GPUs whose CPUs and memory fit.

``where`` narrows the GPUs (models) and nodes (reservations) a task may use. A gang (a job
of several tasks) places its tasks one by one and gives everything back if one does not fit.
"""

from __future__ import annotations

from collections import defaultdict

from gpupool.scheduler.capacity import Claim, FreeCapacity, GpuState, NodeState
from gpupool.scheduler.fit import (
    ANYWHERE,
    Demand,
    Where,
    fraction_demand,
    fraction_fits,
    host_fits,
    least_fraction_share,
    whole_gpus_on,
)
from gpupool.scheduler.types import GpuShare, Placement


def find_spot(demand: Demand, capacity: FreeCapacity, where: Where = ANYWHERE) -> Claim | None:
    """The best spot for ``demand`` in the free capacity, or None when it fits nowhere."""
    if demand.whole:
        return _whole_spot(demand, capacity, where)
    if demand.fractional:
        return _shared_spot(demand, capacity, where) or _fresh_spot(demand, capacity, where)
    return _host_spot(demand, capacity, where)


def take_spot(claim: Claim, demand: Demand, capacity: FreeCapacity) -> tuple[GpuShare, ...]:
    """Subtract the claim from capacity; the GPU shares it holds, for the placement."""
    capacity.take(claim, demand.cpus, demand.memory)
    return tuple([GpuShare(gpu.uuid, share, memory) for gpu, share, memory in claim.parts])


def place_tasks(
    job_id: int, tasks: int, demand: Demand, capacity: FreeCapacity, where: Where = ANYWHERE
) -> list[Placement] | None:
    """All ``tasks`` of a job placed (and taken from capacity), or none of them (None)."""
    claims: list[Claim] = []
    placements: list[Placement] = []
    for task in range(tasks):
        claim = find_spot(demand, capacity, where)
        if claim is None:
            for taken in reversed(claims):
                capacity.give_back(taken, demand.cpus, demand.memory)
            return None
        gpus = take_spot(claim, demand, capacity)
        claims.append(claim)
        placements.append(
            Placement(job_id, claim.node.name, gpus, demand.cpus, demand.memory, task)
        )
    return placements


def unplace(placements: list[Placement], demand: Demand, capacity: FreeCapacity) -> None:
    """Give back to capacity what ``place_tasks`` took for these placements."""
    for placement in reversed(placements):
        node = capacity.by_name[placement.node]
        parts = tuple(
            (node.by_uuid[part.uuid], part.share, part.memory_bytes) for part in placement.gpus
        )
        capacity.give_back(Claim(node, parts), demand.cpus, demand.memory)


def _whole_spot(demand: Demand, capacity: FreeCapacity, where: Where) -> Claim | None:
    wanted = demand.whole
    if wanted > capacity.largest_free_block():
        return None
    for node in capacity.nodes_by_free_count(wanted):
        if not host_fits(node, demand):
            continue
        if where.restricted and not where.node_allowed(node, demand):
            continue
        gpus = whole_gpus_on(node, demand, where)
        if len(gpus) >= wanted:
            chosen = connected(gpus, wanted)
            return Claim(node, tuple([(gpu, 1.0, gpu.memory_bytes) for gpu in chosen]))
    return None


def connected(free: list[GpuState], wanted: int) -> list[GpuState]:
    """``wanted`` of the ``free`` GPUs, inside one connectivity domain when one has enough.

    Best fit between domains (the one with the fewest free GPUs that suffices), so that
    large domains stay whole for large jobs; with no such domain, the fewest domains.
    """
    if len({gpu.domain for gpu in free}) == 1:
        return free[:wanted]
    domains: dict[int, list[GpuState]] = defaultdict(list)
    for gpu in free:
        domains[gpu.domain].append(gpu)
    fitting = [group for group in domains.values() if len(group) >= wanted]
    if fitting:
        return min(fitting, key=lambda group: (len(group), group[0].position))[:wanted]
    largest_first = sorted(domains.values(), key=lambda group: (-len(group), group[0].position))
    chosen = [gpu for group in largest_first for gpu in group][:wanted]
    return sorted(chosen, key=lambda gpu: gpu.position)


def _shared_spot(demand: Demand, capacity: FreeCapacity, where: Where) -> Claim | None:
    least = least_fraction_share(demand, capacity.max_gpu_memory)
    for gpu in capacity.shared_from(least):
        if not where.gpu_ok(gpu):
            continue
        share, memory = fraction_demand(demand, gpu)
        if not fraction_fits(gpu, share, memory):
            continue
        node = capacity.nodes[gpu.rank]
        if host_fits(node, demand) and _node_ok(node, demand, where):
            return Claim(node, ((gpu, share, memory),))
    return None


def _fresh_spot(demand: Demand, capacity: FreeCapacity, where: Where) -> Claim | None:
    for node in capacity.nodes_by_free_count(1):
        if not host_fits(node, demand) or not _node_ok(node, demand, where):
            continue
        fitting = [
            gpu
            for gpu in node.gpus
            if gpu.free and where.gpu_ok(gpu) and fraction_fits(gpu, *fraction_demand(demand, gpu))
        ]
        if fitting:
            [gpu] = connected(fitting, 1)  # the fullest connectivity domain
            share, memory = fraction_demand(demand, gpu)
            return Claim(node, ((gpu, share, memory),))
    return None


def _host_spot(demand: Demand, capacity: FreeCapacity, where: Where) -> Claim | None:
    for node in capacity.nodes_by_free_count(0):
        if host_fits(node, demand) and (where.node_ok is None or where.node_ok(node, demand)):
            return Claim(node, ())
    return None


def _node_ok(node: NodeState, demand: Demand, where: Where) -> bool:
    return not where.restricted or where.node_allowed(node, demand)
