"""What a cycle has learnt cannot start, so that it does not try again.

Within a cycle, capacity only shrinks, reservations only grow and victims are only taken
(the cycle forgets ``NoRoom`` when capacity grows: a nomination given up). So a job that
asks no less than one that found no room finds none either, and one asking no less of the
same team's victims, at no better a rank, finds no victims either. A team's pending jobs
fall into groups (``Group``: GPU types, tasks, kind of GPU request), each summed up by the
least of its jobs: when both memos cover that least job, they cover the whole group.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.scheduler.fit import Demand, DemandCache
from gpupool.scheduler.state import CACHED_MAX, SchedulerState, remembered
from gpupool.scheduler.types import PendingJob

INFINITY = float("inf")


class NoVictims:
    """The searches for victims that found none in this cycle, so that a job asking no
    less of the same team's victims does not search again: the same team, GPU types and
    tasks, a rank no better (``Eligibility.rank``: fewer of its own team's jobs are below
    it) and no less of any resource (more GPUs also make reclaiming harder). Like the
    memo of what found no room (``NoRoom``), it holds for the cycle: victims are only taken."""

    def __init__(self) -> None:
        self._failed: dict[tuple, Frontier] = {}

    @staticmethod
    def _of(job: PendingJob, rank: tuple, demand: Demand) -> tuple[tuple, tuple]:
        return (job.team, *group_key(job, demand)), (rank, sizes_of(demand))

    def add(self, job: PendingJob, rank: tuple, demand: Demand) -> None:
        key, (rank, sizes) = self._of(job, rank, demand)
        self._failed.setdefault(key, Frontier()).add(rank, sizes)

    def covers(self, job: PendingJob, rank: tuple, demand: Demand) -> bool:
        key, (rank, sizes) = self._of(job, rank, demand)
        found = self._failed.get(key)
        return found is not None and found.covers(rank, sizes)

    def covers_group(self, team: str, group: Group, rank: tuple) -> bool:
        """Whether every job of ``group`` ranked ``rank`` or worse is covered."""
        found = self._failed.get((team, *group.key))
        return found is not None and found.covers(rank, group.least)


class NoRoom:
    """The placements that found no room in this cycle, so that whether a job asking no
    less would fit is known without trying: the same GPU types, tasks and kind of GPU
    request, no less of any resource and a max runtime no shorter (reservations let a job
    that ends sooner use more nodes). Capacity only shrinks and reservations only grow while
    it holds; the cycle clears it when capacity grows (a nomination given up)."""

    def __init__(self) -> None:
        self._failed: dict[tuple, Frontier] = {}

    def add(self, job: PendingJob, demand: Demand) -> None:
        frontier = self._failed.setdefault(group_key(job, demand), Frontier())
        frontier.add((runtime_of(job),), sizes_of(demand))

    def covers(self, job: PendingJob, demand: Demand) -> bool:
        found = self._failed.get(group_key(job, demand))
        return found is not None and found.covers((runtime_of(job),), sizes_of(demand))

    def covers_group(self, group: Group) -> bool:
        found = self._failed.get(group.key)
        return found is not None and found.covers((group.runtime,), group.least)

    def clear(self) -> None:
        self._failed.clear()


class Frontier:
    """Failures as (order, sizes) pairs, only the least of them: another is covered when
    one of them is no greater in both."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[tuple[tuple, tuple]] = []

    def covers(self, order: tuple, sizes: tuple) -> bool:
        for failed_order, failed in self.entries:
            if order >= failed_order and all(a >= b for a, b in zip(sizes, failed, strict=True)):
                return True
        return False

    def add(self, order: tuple, sizes: tuple) -> None:
        if self.covers(order, sizes):
            return
        self.entries = [
            (kept_order, kept)
            for kept_order, kept in self.entries
            if not (kept_order >= order and all(a >= b for a, b in zip(kept, sizes, strict=True)))
        ]
        self.entries.append((order, sizes))


@dataclass(slots=True)
class Group:
    """A team's pending jobs of one kind (GPU types, tasks, kind of GPU request), as the
    least of each: what covers this covers every job of the group."""

    key: tuple
    least: tuple
    runtime: float


def groups_of(
    jobs: Iterable[PendingJob], demands: DemandCache, state: SchedulerState
) -> list[Group]:
    """The groups of these jobs (one team's), each as the least of its jobs."""
    # the distinct shape objects (``shape_of`` makes equal shapes one), for this call only
    shapes = {id(shape): shape for shape in (shape_of(job, demands, state) for job in jobs)}
    return groups_of_shapes(shapes.values())


def groups_of_shapes(shapes: Iterable[tuple]) -> list[Group]:
    """The groups of jobs of these shapes (``shape_of``), each as the least of them."""
    groups: dict[tuple, Group] = {}
    for key, sizes, runtime in shapes:
        found = groups.get(key)
        if found is None:
            groups[key] = Group(key, sizes, runtime)
        else:
            found.least = tuple(map(min, found.least, sizes))
            found.runtime = min(found.runtime, runtime)
    return list(groups.values())


def merged(parts: Iterable[list[Group]]) -> list[Group]:
    """The groups of the jobs of all ``parts`` (each the groups of some of the jobs), new
    objects: the parts are not changed."""
    groups: dict[tuple, Group] = {}
    for part in parts:
        for group in part:
            found = groups.get(group.key)
            if found is None:
                groups[group.key] = Group(group.key, group.least, group.runtime)
            else:
                found.least = tuple(map(min, found.least, group.least))
                found.runtime = min(found.runtime, group.runtime)
    return list(groups.values())


# A pending job (frozen) waits through many cycles, and most share a few shapes: its shape
# is worked out once, kept on the state by job id (an entry counts for its job only), and
# equal shapes are one object.
def shape_of(job: PendingJob, demands: DemandCache, state: SchedulerState) -> tuple:
    """(group key, sizes, runtime) of a job, one object per distinct shape."""
    found = state.job_shapes.get(job.job_id)
    if found is not None and found[0] is job:
        return found[1]
    demand = demands.of(job.request)
    shape = (group_key(job, demand), sizes_of(demand), runtime_of(job))
    if len(state.job_shapes) >= CACHED_MAX:
        state.shapes.clear()
    shape = state.shapes.setdefault(shape, shape)
    remembered(state.job_shapes, job.job_id, (job, shape))
    return shape


def kind_of(demand: Demand) -> int:
    return 2 if demand.whole else 1 if demand.fractional else 0


def sizes_of(demand: Demand) -> tuple:
    return (demand.gpus, demand.gpu_memory or 0, demand.cpus, demand.memory)


def group_key(job: PendingJob, demand: Demand) -> tuple:
    return (job.gpu_types, job.tasks, kind_of(demand))


def runtime_of(job: PendingJob) -> float:
    return INFINITY if job.max_runtime is None else job.max_runtime
