"""One scheduling cycle: a pure function of a snapshot (and a clock), in four phases."""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.scheduler.capacity import FreeCapacity, build_capacity
from gpupool.scheduler.fit import ShapeKey, shape_key
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

    A placed job's capacity is taken at once. Capacity only shrinks, so once a request shape
    has not fitted, later jobs of the same shape are passed over without a search.
    """
    placements: list[Placement] = []
    unplaced: list[QueuedJob] = []
    failed: set[ShapeKey] = set()
    for queued in queue:
        placement = _try_place(queued, capacity, failed)
        if placement is None:
            unplaced.append(queued)
        else:
            placements.append(placement)
    return placements, unplaced


def _try_place(
    queued: QueuedJob, capacity: FreeCapacity, failed: set[ShapeKey]
) -> Placement | None:
    request = queued.job.request
    key = shape_key(request)
    if key in failed:
        return None
    claim = find_spot(request, capacity)
    if claim is None:
        failed.add(key)
        return None
    gpus = take_spot(claim, request, capacity)
    return Placement(
        job_id=queued.job.job_id,
        node=claim.node.name,
        gpus=gpus,
        cpus=request.cpus,
        memory_bytes=request.memory_bytes or 0,
    )
