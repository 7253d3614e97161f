"""What each team holds against its guarantee, its limit and its fair share, during a cycle.

GPUs are counted as compute shares: a whole GPU is 1, a quarter GPU 0.25. A team's
**fair share** is a water-fill of the pool's GPUs: each team first gets its guarantee (or
its demand, if smaller), and what is left goes to the teams that want more, in proportion
to their weights, never beyond a team's demand or limit. A team's demand is what it holds
plus what it waits for. Fair shares decide who may take GPUs back by preemption: a team
under its fair share may preempt a team above its own, but never so far that the victim
falls below it; a team within its guarantee may also take the last job that leaves a team
above its guarantee and its fair share below that share (``preemption.Eligibility``). So no
preemption can be answered by another (no cycles).

A GPU-memory-only request counts as the share of a GPU it takes (``job_gpus``); what a
placement holds is charged as placed. Teams take turns (``order_key``) in the order in which
the water-fill hands out GPUs, so that one cycle places what the fair shares say.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpupool.scheduler.kept import ALLOCATION_KEY, recounted
from gpupool.scheduler.state import SchedulerState, remembered
from gpupool.scheduler.types import Allocation, PendingJob, TeamQuota

EPSILON = 1e-6
UNLIMITED = float("inf")


def fixed_gpus(job: PendingJob) -> float | None:
    """The GPUs a pending job asks for when they do not depend on the pool's GPUs (None: a
    request of GPU memory alone, see ``job_gpus``)."""
    request = job.request
    if request.gpus:
        return request.gpus * job.tasks
    return None if request.gpu_memory_bytes else 0.0


def job_gpus(job: PendingJob, gpu_memories: Sequence[int] = ()) -> float:
    """The GPUs a pending job asks for, all tasks together (0 for none).

    A request of GPU memory alone holds a share of one GPU: its memory over the GPU's. Which
    GPU it lands on is not known yet, so it counts as the share it takes on the smallest GPU
    of ``gpu_memories`` (sorted) that can hold it, the most it can take (1 without one).
    """
    gpus = fixed_gpus(job)
    if gpus is not None:
        return gpus
    memory = job.request.gpu_memory_bytes
    at = bisect_left(gpu_memories, memory)
    share = min(1.0, memory / gpu_memories[at]) if at < len(gpu_memories) else 1.0
    return share * job.tasks


def waiting_by_team(pending: Iterable[PendingJob], gpu_memories: Sequence[int]) -> dict[str, float]:
    """The GPUs the pending jobs ask for (``job_gpus``), by team (in name order)."""
    counts: dict[str, Counter[float]] = {}
    for job in pending:
        counts.setdefault(job.team, Counter())[job_gpus(job, gpu_memories)] += 1
    return {team: total_gpus(counts[team]) for team in sorted(counts)}


def total_gpus(counted: Mapping[float, int]) -> float:
    """The sum of GPUs counted by size, correctly rounded: the same whatever the order of
    the jobs (kept queues count them as they come and go)."""
    return math.fsum(gpus * count for gpus, count in counted.items())


# an allocation (frozen) lives for many cycles: its GPUs are summed once, kept on the state
# by its job and task (an entry counts for its allocation only)
def held_gpus(allocation: Allocation, state: SchedulerState) -> float:
    name = (allocation.job_id, allocation.task)
    found = state.allocation_gpus.get(name)
    if found is not None and found[0] is allocation:
        return found[1]
    gpus = sum(part.share for part in allocation.gpus)
    remembered(state.allocation_gpus, name, (allocation, gpus))
    return gpus


def held_by_team(
    allocations: Sequence[Allocation], state: SchedulerState
) -> tuple[dict[str, float], dict[str, float]]:
    """The GPUs each team's allocations hold, and those its non-preemptible ones hold (teams
    in name order), each sum correctly rounded by size (``total_gpus``): the same whatever
    the order of the allocations, so that counting from the last call's counts (kept on the
    state), less the allocations gone and plus those come, gives what counting all of them
    anew does."""

    def weigh(allocation: Allocation) -> tuple[tuple[str, float, bool], int]:
        return (allocation.team, held_gpus(allocation, state), allocation.preemptible), 1

    kept, counts = recounted(state.team_held, allocations, ALLOCATION_KEY, weigh)
    if kept is not None:
        state.team_held = kept
    by_team: dict[str, Counter[float]] = {}
    unpreemptible: dict[str, Counter[float]] = {}
    for (team, gpus, preemptible), count in counts.items():
        by_team.setdefault(team, Counter())[gpus] += count
        if not preemptible:
            unpreemptible.setdefault(team, Counter())[gpus] += count
    return (
        {team: total_gpus(by_team[team]) for team in sorted(by_team)},
        {team: total_gpus(unpreemptible[team]) for team in sorted(unpreemptible)},
    )


class Ledger:
    """Teams' held GPUs (kept current as the cycle places and preempts) and fair shares."""

    def __init__(
        self,
        quotas: Iterable[TeamQuota],
        allocations: Sequence[Allocation],
        pending: Sequence[PendingJob],
        pool_gpus: float,
        gpu_memories: Iterable[int] = (),
        demand_of: Callable[[list[int]], dict[str, float]] | None = None,
        state: SchedulerState | None = None,
    ) -> None:
        """``demand_of``: the GPUs the pending jobs ask for by team, given the pool's GPU
        memory sizes (``waiting_by_team`` of ``pending`` when None); ``state``: what the
        cycles before counted (None: count anew)."""
        self.quotas: dict[str, TeamQuota] = {quota.team: quota for quota in quotas}
        # each team's guarantee, all GPU models together (asked for at every turn and try)
        self._guaranteed = {
            team: sum(quota.guarantee.values()) for team, quota in self.quotas.items()
        }
        self.pool_gpus = pool_gpus
        self.gpu_memories = sorted(memory for memory in gpu_memories if memory > 0)
        state = state if state is not None else SchedulerState()
        held, unpreemptible = held_by_team(allocations, state)
        self.held: dict[str, float] = defaultdict(float, held)
        self.unpreemptible: dict[str, float] = defaultdict(float, unpreemptible)
        wanted = (
            demand_of(self.gpu_memories)
            if demand_of is not None
            else waiting_by_team(pending, self.gpu_memories)
        )
        demand = {team: self.held.get(team, 0.0) + wanted.get(team, 0.0) for team in wanted}
        for team, gpus in self.held.items():
            demand.setdefault(team, gpus)
        self.demand = demand
        self.fair = water_fill(
            pool_gpus, demand, self._guarantees(), self._limits(), self._weights()
        )
        self.guaranteed_total = sum(self.guarantee(team) for team in self.quotas)
        # GPUs of the pending jobs not tried yet in this cycle, for the teams that have a
        # guarantee: what such a team below its guarantee may still need of the free GPUs
        self.untried: dict[str, float] = {
            team: gpus for team, gpus in wanted.items() if self.guarantee(team) > 0
        }
        self._asleep: dict[str, float] = {}
        self.changes = 0  # charges and refunds so far: what teams hold changed

    # -- quotas ---------------------------------------------------------------------------

    def guarantee(self, team: str) -> float:
        return self._guaranteed.get(team, 0.0)

    def limit(self, team: str) -> float:
        quota = self.quotas.get(team)
        return UNLIMITED if quota is None or quota.limit is None else quota.limit

    def weight(self, team: str) -> float:
        quota = self.quotas.get(team)
        return quota.weight if quota is not None and quota.weight > 0 else 1.0

    def _guarantees(self) -> dict[str, float]:
        return {team: self.guarantee(team) for team in self.quotas}

    def _limits(self) -> dict[str, float]:
        return {team: self.limit(team) for team in self.quotas}

    def _weights(self) -> dict[str, float]:
        return {team: self.weight(team) for team in self.quotas}

    # -- questions ------------------------------------------------------------------------

    def gpus(self, job: PendingJob) -> float:
        """The GPUs ``job`` counts for against limits, guarantees and fair shares."""
        return job_gpus(job, self.gpu_memories)

    def fits_limit(self, team: str, gpus: float) -> bool:
        return self.held[team] + gpus <= self.limit(team) + EPSILON

    def within_guarantee(self, team: str, gpus: float, held: float | None = None) -> bool:
        """Whether ``team`` with ``gpus`` more stays within its guarantee (holding what it
        holds now, or ``held``)."""
        held = self.held[team] if held is None else held
        return held + gpus <= self.guarantee(team) + EPSILON

    def within_fair_share(self, team: str, gpus: float, held: float | None = None) -> bool:
        """``within_guarantee``, for its fair share."""
        held = self.held[team] if held is None else held
        return held + gpus <= self.fair.get(team, 0.0) + EPSILON

    def unpreemptible_fits(self, team: str, gpus: float) -> bool:
        """Non-preemptible work runs inside its team's guarantee, or in the part of the pool
        nobody is guaranteed: otherwise a guarantee could not be taken back."""
        if self.within_guarantee(team, gpus):
            return True
        spare = max(0.0, self.pool_gpus - self.guaranteed_total)
        borrowed = sum(
            max(0.0, held - self.guarantee(owner)) for owner, held in self.unpreemptible.items()
        )
        return borrowed + gpus <= spare + EPSILON

    def reclaim_floor(self, team: str) -> float:
        """Above this a team may lose a job to a team within its guarantee: its guarantee
        and its fair share (see ``preemption.Eligibility.may_take``)."""
        return max(self.fair.get(team, 0.0), self.guarantee(team))

    def guarantee_need(self, team: str) -> float:
        """The free GPUs ``team`` may still claim in this cycle within its guarantee."""
        untried = self.untried.get(team, 0.0)
        if untried <= EPSILON:
            return 0.0
        return max(0.0, min(untried, self.guarantee(team) - self.held[team]))

    def needed_by_others(self, team: str) -> tuple[float, list[str]]:
        """The free GPUs other teams below their guarantee may still claim in this cycle."""
        total = 0.0
        teams: list[str] = []
        for other in self.untried:
            if other == team:
                continue
            need = self.guarantee_need(other)
            if need > EPSILON:
                total += need
                teams.append(other)
        return total, teams

    def tried(self, team: str, gpus: float) -> None:
        """A job of ``team`` was tried: its GPUs no longer count as still to be claimed."""
        if team in self.untried:
            left = self.untried[team] - gpus
            if left <= EPSILON:
                del self.untried[team]
            else:
                self.untried[team] = left

    def asleep(self, team: str) -> None:
        """None of the team's jobs left can start in this cycle: they claim no free GPUs
        (until ``awake``)."""
        gpus = self.untried.pop(team, None)
        if gpus is not None:
            self._asleep[team] = gpus

    def awake(self) -> None:
        self.untried.update(self._asleep)
        self._asleep.clear()

    def order_key(self, team: str) -> tuple[int, float]:
        """Teams under their guarantee first (least served first), then by the GPUs held
        beyond the guarantee per unit of weight: the order in which ``water_fill`` hands out
        the rest of the pool, so that the turns place what the fair shares say and the next
        cycle has nothing to take back."""
        guarantee = self.guarantee(team)
        held = self.held[team]
        if held < guarantee - EPSILON:
            return (0, held / guarantee)
        return (1, (held - guarantee) / self.weight(team))

    # -- changes --------------------------------------------------------------------------

    def charge(self, team: str, gpus: float, preemptible: bool = True) -> None:
        self.changes += 1
        self.held[team] += gpus
        if not preemptible:
            self.unpreemptible[team] += gpus

    def refund(self, team: str, gpus: float, preemptible: bool = True) -> None:
        self.changes += 1
        self.held[team] -= gpus
        if not preemptible:
            self.unpreemptible[team] -= gpus


def water_fill(
    capacity: float,
    demand: Mapping[str, float],
    guarantees: Mapping[str, float],
    limits: Mapping[str, float],
    weights: Mapping[str, float],
) -> dict[str, float]:
    """Fair shares: guarantees (up to demand) first, the rest by weight up to demand/limit.

    Guarantees larger than the pool (nodes left) are scaled down to fit it.
    """
    caps = {team: min(wanted, limits.get(team, UNLIMITED)) for team, wanted in demand.items()}
    share = {team: min(guarantees.get(team, 0.0), cap) for team, cap in caps.items()}
    base = sum(share.values())
    if base > capacity and base > 0:
        scale = capacity / base
        share = {team: value * scale for team, value in share.items()}
        return share
    left = capacity - base
    active = {team for team in caps if share[team] < caps[team] - EPSILON}
    while left > EPSILON and active:
        total_weight = sum(weights.get(team, 1.0) for team in active)
        filled = set()
        for team in active:
            room = caps[team] - share[team]
            offer = left * weights.get(team, 1.0) / total_weight
            if offer >= room - EPSILON:
                filled.add(team)
        if not filled:
            for team in active:
                share[team] += left * weights.get(team, 1.0) / total_weight
            break
        for team in filled:
            left -= caps[team] - share[team]
            share[team] = caps[team]
        active -= filled
    return share
