"""When a job's least-attained-service level next changes (``Policy.level_wakeups``).

The replay's events are arrivals and completions; a running job that passes a threshold
between two of them keeps its level until the next one, and a pending job of the level it
left cannot preempt it until then. Tiresias' simulator demotes at the crossing itself (a
"queue jump" event), and so does the replay when the policy asks for ``level_wakeups``; it
then also wakes when a waiting job starves (``starvation_factor``: it goes back to level 0).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence

from gpupool.domain.policy import Policy
from gpupool.scheduler.ordering import LEVELLED
from gpupool.scheduler.types import Allocation, PendingJob


def next_crossing(
    running: Iterable[Sequence[Allocation]], policy: Policy, now: float
) -> float | None:
    """The first time after ``now`` (whole seconds, as the traces count) at which a running
    job's attained service (earlier attempts plus its GPUs times the time this one ran)
    reaches the next of ``policy.las_thresholds``; None when none will."""
    thresholds = policy.las_thresholds
    if policy.order not in LEVELLED or not thresholds:
        return None
    first: float | None = None
    for allocations in running:
        crossing = _crossing(allocations, thresholds, now)
        if crossing is not None and (first is None or crossing < first):
            first = crossing
    return first


def _crossing(
    allocations: Sequence[Allocation], thresholds: tuple[float, ...], now: float
) -> float | None:
    head = allocations[0]
    gpus = sum(part.share for allocation in allocations for part in allocation.gpus)
    attained = head.attained + gpus * max(0.0, now - head.started_at)
    level = bisect_right(thresholds, attained)
    if level >= len(thresholds) or gpus <= 0:
        return None
    exact = head.started_at + (thresholds[level] - head.attained) / gpus
    # rounded up so that the job has passed the threshold at that time (a rounding error
    # must not bring back the same time over and over)
    return max(float(math.ceil(exact - 1e-6)), math.floor(now) + 1.0)


def next_starving(pending: Iterable[PendingJob], policy: Policy, now: float) -> float | None:
    """The first time after ``now`` (whole seconds) at which a waiting job above level 0 has
    waited ``starvation_factor`` times its attained service (and ``starvation_min_wait``)
    since it was queued, as ``ordering.queue_key`` counts; None when none will."""
    thresholds = policy.las_thresholds
    if policy.order not in LEVELLED or not thresholds or policy.starvation_factor <= 0:
        return None
    first: float | None = None
    for job in pending:
        if job.attained < thresholds[0]:
            continue  # level 0: nothing to starve from
        queued = job.queued_at if job.queued_at is not None else job.submitted_at
        wait = max(policy.starvation_min_wait, policy.starvation_factor * job.attained)
        starves = float(math.ceil(queued + wait - 1e-6))
        if starves > now and (first is None or starves < first):
            first = starves
    return first
