"""Phase 4: a reason for every job left pending, and the submit-time size check.

Reasons are worked out once, after placement, against the capacity that is left: capacity
only shrinks during a cycle, so a job that did not fit when it was tried does not fit at the
end either. Requests of one shape share one answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.scheduler.capacity import FreeCapacity
from gpupool.scheduler.fit import Demand, DemandCache, demand_of
from gpupool.scheduler.messages import NO_NODES_MESSAGE, size_message, waiting_message
from gpupool.scheduler.ordering import QueuedJob
from gpupool.scheduler.shortfall import ShortfallFinder
from gpupool.scheduler.types import NodeCapacity, PendingReason

# Used only if a job that was not placed turns out to fit, which placement rules out.
UNPLACED_MESSAGE = "was not placed in this cycle"


def infeasible_reason(request: ResourceRequest, nodes: Sequence[NodeCapacity]) -> str | None:
    """Why no node of ``nodes`` could run ``request`` even if empty; None if one could.

    Every node given counts, whatever its ``schedulable`` flag: pass the nodes to judge by.
    An empty pool judges nothing (None): nodes may yet join.
    """
    if not nodes:
        return None
    demand = demand_of(request)
    shortfall = ShortfallFinder(FreeCapacity(nodes)).find(demand)
    return None if shortfall is None else size_message(demand, shortfall)


class Explainer:
    """Reasons against the capacity left after placement and against the empty nodes."""

    def __init__(self, capacity: FreeCapacity, schedulable: Sequence[NodeCapacity]):
        self._has_nodes = bool(capacity.nodes)
        self._now = ShortfallFinder(capacity)
        self._empty = ShortfallFinder(FreeCapacity(schedulable)) if schedulable else None
        self._demands = DemandCache()
        self._memo: dict[int, tuple[Reason, str]] = {}  # by id: the cache makes one per shape

    def reason(self, request: ResourceRequest) -> tuple[Reason, str]:
        demand = self._demands.of(request)
        found = self._memo.get(id(demand))
        if found is None:
            found = self._memo[id(demand)] = self._reason(demand)
        return found

    def _reason(self, demand: Demand) -> tuple[Reason, str]:
        if not self._has_nodes or self._empty is None:
            return Reason.NO_NODES, NO_NODES_MESSAGE
        too_big = self._empty.find(demand)
        if too_big is not None:
            return Reason.NO_NODE_BIG_ENOUGH, size_message(demand, too_big)
        waiting = self._now.find(demand)
        if waiting is None:
            return Reason.QUEUED, UNPLACED_MESSAGE
        return waiting.code, waiting_message(demand, waiting)


def explain_unplaced(
    unplaced: Sequence[QueuedJob], capacity: FreeCapacity, nodes: Sequence[NodeCapacity]
) -> dict[int, PendingReason]:
    """Phase 4: the reason and team-queue position of each job not placed."""
    if not unplaced:
        return {}
    explainer = Explainer(capacity, [node for node in nodes if node.schedulable])
    reasons: dict[int, PendingReason] = {}
    for queued in unplaced:
        code, message = explainer.reason(queued.job.request)
        reasons[queued.job.job_id] = PendingReason(
            queued.job.job_id, code, message, queued.position
        )
    return reasons
