"""Choosing running jobs to preempt for a pending one, losing the least work.

A running job may be preempted for a pending job J when it is preemptible, not already
chosen in this cycle, and one of:

* it is already stopping (a preemption or cancel under way): it costs nothing more;
* **reclaim**: it belongs to another team, and either J's team stays within its fair share
  with J while the victim's team stays at or above its own without all the victims of the
  choice, or J's team stays within its guarantee with J while the victim's team is above its
  guarantee and its fair share before this victim (``Eligibility.may_take``); losses add up
  over the victims of one choice and over the cycle; never the other way round, so no cycles;
* **inside J's team**: J outranks it: a higher priority, or the same priority and a lower
  least-attained-service level (the ``srtf`` reference: less work left), and it has run for
  at least ``min_runtime``.

Victims are taken in this order: stopping ones, other teams' (over their share) before J's
own team's, lowest priority first, then least time since their last checkpoint (the work a
restart loses). For a one-task job the node needing the cheapest set of victims wins, by the
same order: fewest victims of J's own team, then the worst victim's priority (lower wins) and
level (higher wins), then the work lost; a gang takes victims in that order across nodes
until all its tasks fit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.scheduler.capacity import FreeCapacity, NodeState
from gpupool.scheduler.fit import CPU_EPSILON, Demand, Where, fraction_demand
from gpupool.scheduler.ledger import EPSILON, Ledger
from gpupool.scheduler.ordering import level_of, running_attained
from gpupool.scheduler.types import SHARE_EPSILON, Allocation, PendingJob, Policy

MAX_NODES_EXAMINED = 64  # nodes searched for one job, best candidates first


@dataclass(slots=True)
class RunningJob:
    """A running job (all its tasks) as a possible victim."""

    job_id: int
    team: str
    priority: int
    preemptible: bool
    stopping: bool
    started_at: float
    level: int
    remaining: float
    lost: float  # seconds since its last checkpoint (or start)
    gpus: float
    allocations: list[Allocation] = field(default_factory=list)

    def key(self, team: str) -> tuple:
        return (
            0 if self.stopping else 1,
            0 if self.team != team else 1,
            self.priority,
            -self.level,
            self.lost,
            self.job_id,
        )


def running_jobs(
    allocations: Sequence[Allocation], policy: Policy, now: float, remaining: Mapping[int, float]
) -> dict[int, RunningJob]:
    jobs: dict[int, RunningJob] = {}
    for allocation in allocations:
        job = jobs.get(allocation.job_id)
        if job is None:
            since = allocation.checkpoint_at if allocation.checkpoint_at is not None else None
            since = max(since or allocation.started_at, allocation.started_at)
            job = jobs[allocation.job_id] = RunningJob(
                job_id=allocation.job_id,
                team=allocation.team,
                priority=allocation.priority,
                preemptible=allocation.preemptible,
                stopping=allocation.stopping,
                started_at=allocation.started_at,
                level=0,
                remaining=remaining.get(allocation.job_id, 0.0),
                lost=max(0.0, now - since),
                gpus=0.0,
            )
        job.allocations.append(allocation)
        job.gpus += sum(part.share for part in allocation.gpus)
        job.stopping = job.stopping or allocation.stopping
    for job in jobs.values():
        attained = sum(running_attained(a, now) for a in job.allocations) - sum(
            a.attained for a in job.allocations[1:]
        )
        job.level = level_of(attained, policy)
    return jobs


@dataclass(slots=True)
class Choice:
    victims: list[RunningJob]

    @property
    def only_stopping(self) -> bool:
        return all(victim.stopping for victim in self.victims)


class Preemptor:
    """Finds victims for pending jobs in one cycle; a victim is chosen at most once."""

    def __init__(
        self,
        running: Mapping[int, RunningJob],
        capacity: FreeCapacity,
        ledger: Ledger,
        policy: Policy,
        now: float,
        remaining: Mapping[int, float],
    ) -> None:
        self.capacity = capacity
        self.ledger = ledger
        self.policy = policy
        self.now = now
        self.remaining = remaining
        self.running = running
        self.by_node: dict[str, list[RunningJob]] = defaultdict(list)
        for job in running.values():
            if job.preemptible or job.stopping:
                for node in {allocation.node for allocation in job.allocations}:
                    self.by_node[node].append(job)
        self.taken: set[int] = set()
        self.any = bool(self.by_node)

    # -- eligibility --------------------------------------------------------------------------

    def _eligible(self, job: PendingJob, level: int, gpus: float) -> Eligibility:
        return Eligibility(self, job, level, gpus)

    # -- search -------------------------------------------------------------------------------

    def find(self, job: PendingJob, level: int, demand: Demand, where: Where) -> Choice | None:
        """The victims whose end lets ``job`` start, or None when there are none to take."""
        if not self.any:
            return None
        gpus = self.ledger.gpus(job)
        eligible = self._eligible(job, level, gpus)
        if not eligible.possible:
            return None
        if job.tasks == 1:
            return self._one_task(job, demand, where, eligible)
        if demand.whole:
            return self._gang(job, demand, where, eligible)
        return None

    def take(self, choice: Choice) -> None:
        for victim in choice.victims:
            self.taken.add(victim.job_id)

    def _one_task(
        self, job: PendingJob, demand: Demand, where: Where, eligible: Eligibility
    ) -> Choice | None:
        nodes: list[tuple[tuple, NodeState, list[RunningJob]]] = []
        for name, candidates in self.by_node.items():
            node = self.capacity.by_name.get(name)
            if node is None or (where.types and not where.node_allowed(node, demand)):
                continue
            usable = sorted((c for c in candidates if eligible(c)), key=lambda c: c.key(job.team))
            if usable:
                nodes.append((usable[0].key(job.team), node, usable))
        nodes.sort(key=lambda entry: (entry[0], entry[1].rank))
        best: tuple[tuple, list[RunningJob]] | None = None
        for _, node, usable in nodes[:MAX_NODES_EXAMINED]:
            victims = _victims_on(node, usable, demand, where, eligible)
            if victims is None:
                continue
            cost = _cost(victims, job.team)
            if best is None or cost < best[0]:
                best = (cost, victims)
        return Choice(best[1]) if best is not None else None

    def _gang(
        self, job: PendingJob, demand: Demand, where: Where, eligible: Eligibility
    ) -> Choice | None:
        slots = _GangSlots(self.capacity, demand, where)
        if slots.total >= job.tasks:
            return None  # it fits without victims: the placement failed for another reason
        candidates = sorted(
            {c.job_id: c for group in self.by_node.values() for c in group if eligible(c)}.values(),
            key=lambda c: c.key(job.team),
        )
        chosen: list[RunningJob] = []
        losses = eligible.losses()
        for candidate in candidates:
            if not losses.add(candidate):
                continue
            slots.release(candidate)
            chosen.append(candidate)
            if slots.total >= job.tasks:
                return Choice([victim for victim in chosen if slots.helped(victim)])
        return None


class Eligibility:
    """Whether a running job may be preempted for one pending job."""

    __slots__ = (
        "_teams",
        "by_fair_share",
        "by_guarantee",
        "gpus",
        "job",
        "level",
        "possible",
        "preemptor",
        "rank",
        "reclaim",
    )

    def __init__(self, preemptor: Preemptor, job: PendingJob, level: int, gpus: float):
        self.preemptor = preemptor
        self.job = job
        self.level = level
        self.gpus = gpus
        policy = preemptor.policy
        ledger = preemptor.ledger
        self.by_fair_share = policy.reclaim and ledger.within_fair_share(job.team, gpus)
        self.by_guarantee = policy.reclaim and ledger.within_guarantee(job.team, gpus)
        self.reclaim = self.by_fair_share or self.by_guarantee
        self._teams: dict[str, tuple[float, float, float]] = {}  # held, fair share, floor
        if policy.order == "srtf":
            self.rank = (-job.priority, preemptor.remaining.get(job.job_id, 0.0))
        else:
            self.rank = (-job.priority, level)
        self.possible = True

    def __call__(self, victim: RunningJob) -> bool:
        preemptor = self.preemptor
        if victim.job_id in preemptor.taken:
            return False
        if victim.stopping:
            return True
        if not victim.preemptible:
            return False
        if victim.team != self.job.team:
            return self.reclaim and self.may_take(victim, 0.0)
        policy = preemptor.policy
        if not policy.las_preemption:
            return False
        if preemptor.now - victim.started_at < policy.min_runtime:
            return False
        if policy.order == "srtf":
            rank = (-victim.priority, victim.remaining)
        else:
            rank = (-victim.priority, victim.level)
        return self.rank < rank

    def may_take(self, victim: RunningJob, lost: float) -> bool:
        """Whether another team's ``victim`` may go, its team losing ``lost`` already (to
        the victims chosen before it in the same choice; earlier choices are in ``held``).

        * Fair share: J's team stays within its fair share with J, and the victim's team
          stays at or above its own without every victim of the choice.
        * Guarantee: J's team stays within its guarantee with J, and the victim's team is
          still above its guarantee and its fair share before this victim, so that a
          guarantee is reclaimable even where fair shares are fractions of a GPU or a borrower
          runs one large job (the last victim may leave its team below its fair share, never
          more).

        Neither lets the victim's team take the GPUs back: it could only preempt a team above
        its fair share (J's team is within its own) or above its guarantee (J's team is not),
        so no preemption is answered by another.
        """
        figures = self._teams.get(victim.team)
        if figures is None:
            ledger = self.preemptor.ledger
            figures = self._teams[victim.team] = (
                ledger.held[victim.team],
                ledger.fair.get(victim.team, 0.0),
                ledger.reclaim_floor(victim.team),
            )
        held, fair, floor = figures
        held -= lost
        if self.by_fair_share and held - victim.gpus >= fair - EPSILON:
            return True
        return self.by_guarantee and held > floor + EPSILON

    def losses(self) -> Losses:
        return Losses(self)


class Losses:
    """The GPUs each other team loses to one choice of victims, so that the rules hold for
    all the victims together, not only for each alone."""

    __slots__ = ("eligible", "lost")

    def __init__(self, eligible: Eligibility):
        self.eligible = eligible
        self.lost: dict[str, float] = {}

    def add(self, victim: RunningJob) -> bool:
        """Count ``victim`` in, if the victims so far leave room for it."""
        if victim.stopping or victim.team == self.eligible.job.team:
            return True
        lost = self.lost.get(victim.team, 0.0)
        if not self.eligible.may_take(victim, lost):
            return False
        self.lost[victim.team] = lost + victim.gpus
        return True


def _cost(victims: Iterable[RunningJob], team: str) -> tuple:
    """Lower is cheaper: no victim at all (only stopping jobs), fewest of J's own team, the
    worst victim's (priority, -level) lowest, the least work lost, the fewest victims."""
    counted = [victim for victim in victims if not victim.stopping]
    own = sum(1 for victim in counted if victim.team == team)
    lost = sum(victim.lost * victim.gpus for victim in counted)
    worst = max(((v.priority, -v.level) for v in counted), default=())
    return (len(counted) > 0, own, worst, lost, len(counted))


class _NodeScratch:
    """A node's GPUs and host resources as they would be without some victims."""

    def __init__(self, node: NodeState):
        self.node = node
        self.share = {gpu.uuid: gpu.used_share for gpu in node.gpus}
        self.memory = {gpu.uuid: gpu.used_memory for gpu in node.gpus}
        self.whole = {gpu.uuid: gpu.whole for gpu in node.gpus}
        self.cpus = node.cpus
        self.host_memory = node.memory_bytes

    def release(self, victim: RunningJob) -> None:
        for allocation in victim.allocations:
            if allocation.node != self.node.name:
                continue
            self.cpus += allocation.cpus
            self.host_memory += allocation.memory_bytes
            for part in allocation.gpus:
                if part.uuid not in self.share:
                    continue
                self.share[part.uuid] = max(0.0, self.share[part.uuid] - part.share)
                self.memory[part.uuid] = max(0, self.memory[part.uuid] - part.memory_bytes)
                if part.share >= 1.0 - SHARE_EPSILON:
                    self.whole[part.uuid] = False

    def free_whole(self, demand: Demand, where: Where) -> int:
        least = demand.gpu_memory or 0
        return sum(
            1
            for gpu in self.node.gpus
            if not self.whole[gpu.uuid]
            and self.share[gpu.uuid] <= SHARE_EPSILON
            and self.memory[gpu.uuid] == 0
            and gpu.memory_bytes >= least
            and where.gpu_ok(gpu)
        )

    def host_fits(self, demand: Demand) -> bool:
        return self.cpus >= demand.cpus - CPU_EPSILON and self.host_memory >= demand.memory

    def fits(self, demand: Demand, where: Where) -> bool:
        if not self.host_fits(demand):
            return False
        if demand.whole:
            return self.free_whole(demand, where) >= demand.whole
        if demand.fractional:
            for gpu in self.node.gpus:
                if self.whole[gpu.uuid] or not where.gpu_ok(gpu):
                    continue
                share, memory = fraction_demand(demand, gpu)
                if (
                    self.share[gpu.uuid] + share <= 1.0 + SHARE_EPSILON
                    and self.memory[gpu.uuid] + memory <= gpu.memory_bytes
                ):
                    return True
            return False
        return True


def _victims_on(
    node: NodeState,
    usable: list[RunningJob],
    demand: Demand,
    where: Where,
    eligible: Eligibility,
) -> list[RunningJob] | None:
    """The victims (in order) after whose end ``demand`` fits ``node``, fewest kept."""
    scratch = _NodeScratch(node)
    chosen: list[RunningJob] = []
    losses = eligible.losses()
    for victim in usable:
        if not losses.add(victim):
            continue
        scratch.release(victim)
        chosen.append(victim)
        if scratch.fits(demand, where):
            return _pruned(node, chosen, demand, where)
    return None


def _pruned(
    node: NodeState, chosen: list[RunningJob], demand: Demand, where: Where
) -> list[RunningJob]:
    """Drop victims (latest, i.e. costliest, first) whose end the demand does not need."""
    kept = list(chosen)
    for victim in reversed(chosen[:-1]):
        trial = [other for other in kept if other is not victim]
        scratch = _NodeScratch(node)
        for other in trial:
            scratch.release(other)
        if scratch.fits(demand, where):
            kept = trial
    return kept


class _GangSlots:
    """How many tasks of a whole-GPU gang fit, node by node, as victims are released."""

    def __init__(self, capacity: FreeCapacity, demand: Demand, where: Where):
        self.capacity = capacity
        self.demand = demand
        self.where = where
        self.scratch: dict[str, _NodeScratch] = {}
        self.slots: dict[str, int] = {}
        self.before: dict[str, int] = {}
        self.total = 0
        for node in capacity.nodes_by_free_count(demand.whole):
            if where.types and not where.node_allowed(node, demand):
                continue
            self.slots[node.name] = self._count(_NodeScratch(node))
            self.total += self.slots[node.name]

    def _count(self, scratch: _NodeScratch) -> int:
        demand = self.demand
        by_gpus = scratch.free_whole(demand, self.where) // demand.whole
        by_cpus = int(scratch.cpus // demand.cpus) if demand.cpus > 0 else by_gpus
        by_memory = int(scratch.host_memory // demand.memory) if demand.memory else by_gpus
        return max(0, min(by_gpus, by_cpus, by_memory))

    def release(self, victim: RunningJob) -> None:
        """Count the victim's GPUs and host resources as free."""
        for name in {allocation.node for allocation in victim.allocations}:
            node = self.capacity.by_name.get(name)
            if node is None or (
                self.where.types and not self.where.node_allowed(node, self.demand)
            ):
                continue
            scratch = self.scratch.get(name)
            if scratch is None:
                scratch = self.scratch[name] = _NodeScratch(node)
                self.before[name] = self.slots.get(name, 0)
            scratch.release(victim)
            count = self._count(scratch)
            self.total += count - self.slots.get(name, 0)
            self.slots[name] = count

    def helped(self, victim: RunningJob) -> bool:
        """Whether the victim is on a node where tasks now fit that did not before."""
        return any(
            self.slots.get(a.node, 0) > self.before.get(a.node, 0) for a in victim.allocations
        )
