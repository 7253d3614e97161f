"""One scheduling cycle: a pure function of a snapshot (and a clock), in four phases."""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.scheduler.capacity import FreeCapacity, build_capacity
from gpupool.scheduler.fit import Demand, DemandCache
from gpupool.scheduler.ordering import QueuedJob, order_pending
from gpupool.scheduler.placement import find_spot, take_spot
from gpupool.scheduler.reasons import explain_unplaced
from gpupool.scheduler.types import Clock, Decisions, Placement, Snapshot


def schedule(snapshot: Snapshot, clock: Clock) -> Decisions:
    """Decide which pending jobs start where, and why the others wait."""
    capacity = build_capacity(snapshot.nodes, snapshot.allocations)  # 1. free capacity
    queue = order_pending(snapshot.pending, clock.now())  # 2. order
    placements, unplaced = place_in_order(queue, capacity)  # 3. place
    reasons = explain_unplaced(unplaced, capacity, snapshot.nodes)  # 4. explain
    return Decisions(placements=placements, pending=reasons)


def place_in_order(
    queue: Sequence[QueuedJob], capacity: FreeCapacity
) -> tuple[list[Placement], list[QueuedJob]]:
    """BestEffortFIFO: try each job in turn; one that does not fit does not block the rest.

    A placed job's capacity is taken at once. Capacity only shrinks, so once a demand has
    not fitted, later jobs with the same demand are passed over without a search.
    """
    placements: list[Placement] = []
    unplaced: list[QueuedJob] = []
    demands = DemandCache()
    failed: set[int] = set()  # ids of demands that did not fit (the cache makes one per shape)
    for queued in queue:
        demand = demands.of(queued.job.request)
        placement = None
        if id(demand) not in failed:
            placement = _place(queued.job.job_id, demand, capacity)
        if placement is not None:
            placements.append(placement)
        else:
            failed.add(id(demand))
            unplaced.append(queued)
    return placements, unplaced


def _place(job_id: int, demand: Demand, capacity: FreeCapacity) -> Placement | None:
    claim = find_spot(demand, capacity)
    if claim is None:
        return None
    gpus = take_spot(claim, demand, capacity)
    return Placement(job_id, claim.node.name, gpus, demand.cpus, demand.memory)
