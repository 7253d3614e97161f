"""EASY backfill: the first blocked job of each queue reserves the spot that frees first.

A reservation is worked out from the running jobs whose end is known (a ``max_runtime``,
or a stop under way): on each node, their GPUs free up in end order; the job reserves the
node where enough whole GPUs are free soonest. Later jobs of any team may still use that
node if they end before the reserved time (their ``max_runtime`` says so) or leave enough
GPUs for the reservation; otherwise they wait with the reason ``Reserved``. Of nodes freeing
in time at once, the first by name is reserved, so that no decision depends on the order of
the snapshot.

Only one-task whole-GPU jobs reserve (the usual blocked heads); a node holds at most one
reservation. Jobs that cannot say when they end never prove they end in time, which is
why ``--max-runtime`` lets a job start sooner.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpupool.scheduler.capacity import FreeCapacity, NodeState
from gpupool.scheduler.fit import Demand, Where, host_fits, whole_gpus_on
from gpupool.scheduler.types import SHARE_EPSILON, Allocation, GpuShare, PendingJob, Placement


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: int
    team: str  # a job of another team is named by its team only (reasons.py)
    node: str
    at: float  # when enough GPUs are expected to be free
    gpus: int
    freed: int  # GPUs of the node freed by then


class Reservations:
    """The cycle's reservations, and the rule that keeps later jobs off them."""

    def __init__(self, allocations: Iterable[Allocation], now: float) -> None:
        self.now = now
        self._allocations = allocations
        self._ends: dict[str, list[tuple[float, int]]] | None = None
        self.by_node: dict[str, Reservation] = {}
        self.by_job: dict[int, Reservation] = {}

    @property
    def ends(self) -> dict[str, list[tuple[float, int]]]:
        """Per node, (when, whole GPUs) that the running jobs whose end is known free, in
        end order: worked out when first needed (a cycle that blocks no job never does)."""
        if self._ends is None:
            ends: dict[str, list[tuple[float, int]]] = defaultdict(list)
            for allocation in self._allocations:
                end = _end_of(allocation, self.now)
                if end is not None:
                    whole = _whole(allocation.gpus)
                    if whole:
                        ends[allocation.node].append((end, whole))
            for node_ends in ends.values():
                node_ends.sort()
            self._ends = ends
        return self._ends

    def note(self, placements: Sequence[Placement], job: PendingJob) -> None:
        """Jobs started in this cycle with a max runtime free their GPUs at a known time."""
        if job.max_runtime is None:
            return
        for placement in placements:
            whole = _whole(placement.gpus)
            if whole:
                ends = self.ends[placement.node]
                ends.insert(
                    bisect_right(ends, (self.now + job.max_runtime, whole)),
                    (self.now + job.max_runtime, whole),
                )

    def reserve(
        self, job: PendingJob, demand: Demand, capacity: FreeCapacity, where: Where
    ) -> Reservation | None:
        """Reserve the node where the job's GPUs free up soonest (None: no end is known)."""
        if job.tasks != 1 or not demand.whole or job.job_id in self.by_job:
            return None
        best: Reservation | None = None
        best_rank = -1  # ties between nodes freeing at once: the first by name
        for name, ends in self.ends.items():
            node = capacity.by_name.get(name)
            if node is None or name in self.by_node or not host_fits(node, demand):
                continue
            if where.types and not where.node_allowed(node, demand):
                continue
            free = start = len(whole_gpus_on(node, demand, where))
            for end, gpus in ends:
                free += gpus
                if free >= demand.whole:
                    if best is None or (end, node.rank) < (best.at, best_rank):
                        freed = free - start
                        best = Reservation(job.job_id, job.team, name, end, demand.whole, freed)
                        best_rank = node.rank
                    break
        if best is not None:
            self.by_node[best.node] = best
            self.by_job[job.job_id] = best
        return best

    def blocks(self, node: NodeState, demand: Demand, job: PendingJob) -> bool:
        """Whether placing ``demand`` of ``job`` on ``node`` would delay a reservation."""
        reservation = self.by_node.get(node.name)
        if reservation is None or reservation.job_id == job.job_id:
            return False
        if job.max_runtime is not None and self.now + job.max_runtime <= reservation.at:
            return False
        taking = demand.whole or (1 if demand.uses_gpus else 0)
        return node.free_count - taking + reservation.freed < reservation.gpus

    def where(self, job: PendingJob, types: tuple[str, ...]) -> Where:
        if not self.by_node:
            return Where(types)
        return Where(types, lambda node, demand: not self.blocks(node, demand, job))


def _whole(gpus: Sequence[GpuShare]) -> int:
    return sum(1 for part in gpus if part.share >= 1.0 - SHARE_EPSILON)


def _end_of(allocation: Allocation, now: float) -> float | None:
    if allocation.stopping:
        return now
    if allocation.max_runtime is not None:
        return max(now, allocation.started_at + allocation.max_runtime)
    return None
