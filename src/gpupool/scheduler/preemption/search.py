"""The search for victims: for a one-task job, the node whose victims cost least
(``VictimCost``), nodes walked in the order of their cheapest candidates and passed over
when they could not free enough; for a gang, victims in order across nodes until all its
tasks fit. ``Preemptor`` runs it for one cycle; a victim is chosen at most once."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.policy import Policy
from gpupool.scheduler.capacity import FreeCapacity, GpuState, NodeState, Removal
from gpupool.scheduler.fit import Demand, Where, fits_free, whole_gpus_on
from gpupool.scheduler.ledger import Ledger
from gpupool.scheduler.memo import Frontier
from gpupool.scheduler.preemption.candidates import (
    KeptRunning,
    RunningJob,
    any_victim,
    running_jobs,
)
from gpupool.scheduler.preemption.rules import Eligibility, VictimCost
from gpupool.scheduler.types import SHARE_EPSILON, Allocation, PendingJob

# nodes whose victims could free enough (``_freeable``) searched for one job, best first
MAX_NODES_EXAMINED = 64


def _entry_order(entry: tuple[tuple, int, NodeState, RunningJob]) -> tuple[tuple, int]:
    return entry[0], entry[1]


def _first(item: tuple[float, list]) -> float:
    return item[0]


def _in_base_order(
    pairs: Iterable[tuple[RunningJob, NodeState]],
) -> list[tuple[tuple, int, NodeState, RunningJob]]:
    """(candidate, node) pairs in the order of ``RunningJob.key`` less its team part, then
    node rank, each as (that key, rank, node, candidate)."""
    entries = [
        (
            c.rank(),
            node.rank,
            node,
            c,
        )
        for c, node in pairs
    ]
    entries.sort(key=_entry_order)
    return entries


@dataclass(slots=True)
class Choice:
    victims: list[RunningJob]


class Preemptor:
    """Finds victims for pending jobs in one cycle; a victim is chosen at most once."""

    def __init__(
        self,
        running: Mapping[int, RunningJob] | None,
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
        self._running: Mapping[int, RunningJob] | None = running
        self._allocations: Sequence[Allocation] = ()
        self._kept: KeptRunning | None = None
        self._by_node: dict[str, list[RunningJob]] | None = None
        self.taken: set[int] = set()
        self.any = bool(self.by_node) if running is not None else False
        # per cycle, built on first use: candidates keyed by their order for a team
        self._by_team: dict[str, list[tuple[RunningJob, NodeState]]] | None = None
        self._stopping_order: list[tuple[tuple, int, NodeState, RunningJob]] = []
        self._segments: dict[str, list] = {}
        self._teams: dict[str, list] = {}
        self._sized: dict[str, list[tuple[float, list]]] = {}
        self._least: dict[str, float] = {}
        self._on_node: dict[tuple[str, str], list[RunningJob]] = {}
        self._bounds: dict[tuple[str, str], tuple | None] = {}
        # per (team, GPU types, reclaim by fair share, by guarantee, ``Ledger.changes``):
        # searches of single-task whole-GPU jobs that walked every node with an eligible
        # victim and found none that could free enough, as (rank, (1 + the most any node
        # could free,)), the least of them: a job asking at least that many at no better a
        # rank finds none either, until capacity grows or what a team holds changes
        self._short: dict[tuple, Frontier] = {}
        # per node, built when first needed: each GPU its possible victims hold, with the
        # (team, GPUs) of each of them that is not stopping and the share they hold together
        self._held_on: dict[str, list[tuple[tuple[tuple[str, float], ...], float, GpuState]]] = {}
        # per ``_takeable`` (what a job may take), per node rank: ``_freeable_by_teams``
        self._by_teams: dict[tuple, dict[int, int]] = {}

    @classmethod
    def of(
        cls,
        allocations: Sequence[Allocation],
        capacity: FreeCapacity,
        ledger: Ledger,
        policy: Policy,
        now: float,
        remaining: Mapping[int, float],
        kept: KeptRunning | None = None,
    ) -> Preemptor:
        """A preemptor over the jobs of ``allocations``, worked out when first needed (a
        cycle where every job fits never needs them): from those ``kept`` by the cycles
        before, when given."""
        preemptor = cls(None, capacity, ledger, policy, now, remaining)
        preemptor._allocations = allocations
        preemptor._kept = kept
        preemptor.any = any_victim(allocations)
        return preemptor

    @property
    def running(self) -> Mapping[int, RunningJob]:
        if self._running is None:
            if self._kept is not None:
                self._running = self._kept.update(self._allocations, self.now, self.remaining)
                self._by_node = self._kept.by_node
            else:
                self._running = running_jobs(
                    self._allocations, self.policy, self.now, self.remaining
                )
        return self._running

    @property
    def by_node(self) -> dict[str, list[RunningJob]]:
        """The possible victims (preemptible or stopping) by the nodes they run on."""
        if self._by_node is None and self._kept is not None:
            self.running  # noqa: B018 -- brings the kept jobs and their nodes up to date
        if self._by_node is None:
            by_node: dict[str, list[RunningJob]] = defaultdict(list)
            for job in self.running.values():
                if job.preemptible or job.stopping:
                    for node in {allocation.node for allocation in job.allocations}:
                        by_node[node].append(job)
            self._by_node = by_node
        return self._by_node

    # -- orders (candidate keys do not change within a cycle) -------------------------------

    def _pairs(self) -> dict[str, list[tuple[RunningJob, NodeState]]]:
        """The (candidate, node) pairs on nodes of the capacity of the jobs that are not
        stopping, by team (each team's put in order when first needed: ``_team_order``),
        with the stopping ones in order beside them."""
        if self._by_team is None:
            by_name = self.capacity.by_name
            teams: dict[str, list[tuple[RunningJob, NodeState]]] = {}
            stopping: list[tuple[RunningJob, NodeState]] = []
            for name, candidates in self.by_node.items():
                node = by_name.get(name)
                if node is None:
                    continue
                for c in candidates:
                    if c.stopping:
                        if c.job_id not in self.taken:  # stopping for a nominated job: taken
                            stopping.append((c, node))
                    else:
                        teams.setdefault(c.team, []).append((c, node))
            self._by_team = teams
            self._least = {team: min(c.gpus for c, _ in pairs) for team, pairs in teams.items()}
            self._stopping_order = _in_base_order(stopping)
        return self._by_team

    def _team_order(self, team: str) -> list[tuple[tuple, int, NodeState, RunningJob]]:
        """The team's pairs of jobs that are not stopping, in the order of
        ``RunningJob.key`` less its team part, then node rank."""
        found = self._teams.get(team)
        if found is None:
            found = self._teams[team] = _in_base_order(self._pairs().get(team, []))
        return found

    def _team_by_size(self, team: str) -> list[tuple[float, list]]:
        """``_team_order`` of the team in parts, one per GPUs a job holds (each in that
        order), the fewest GPUs first: a reclaim may take a team's jobs up to some size."""
        found = self._sized.get(team)
        if found is None:
            parts: dict[float, list] = {}
            for entry in self._team_order(team):
                parts.setdefault(entry[3].gpus, []).append(entry)
            found = self._sized[team] = sorted(parts.items(), key=_first)
        return found

    def _stopping(self, team: str) -> list[tuple[tuple, int, NodeState, RunningJob]]:
        """The pairs of stopping jobs in ``key(team)`` order: other teams' first."""
        found = self._segments.get(team)
        if found is None:
            self._pairs()
            entries = self._stopping_order
            found = self._segments[team] = [e for e in entries if e[3].team != team] + [
                e for e in entries if e[3].team == team
            ]
        return found

    def _bound(self, name: str, team: str) -> VictimCost | None:
        """A lower bound of ``VictimCost`` for any choice of victims on node ``name`` for a job of
        ``team`` (None: a stopping job there may cost nothing). A choice holds at least one
        victim, all of them among the node's candidates."""
        key = (name, team)
        if key not in self._bounds:
            candidates = self._sorted_on(name, team)
            first = candidates[0]
            if first.stopping:
                self._bounds[key] = None
            else:
                own = first.team == team  # other teams' candidates come first
                self._bounds[key] = VictimCost.bound(candidates, own)
        return self._bounds[key]

    def _sorted_on(self, name: str, team: str) -> list[RunningJob]:
        found = self._on_node.get((name, team))
        if found is None:
            found = self._on_node[(name, team)] = sorted(
                self.by_node[name], key=lambda c: c.key(team)
            )
        return found

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
            if demand.whole and where.node_ok is None:
                short = self._short.get(self._short_key(job, eligible))
                if short is not None and short.covers(eligible.rank, (demand.whole,)):
                    return None
            return self._one_task(job, demand, where, eligible)
        if demand.whole:
            return self._gang(job, demand, where, eligible)
        return None

    def _short_key(self, job: PendingJob, eligible: Eligibility) -> tuple:
        # what teams hold decides what may be taken: a placement may make more takeable
        flags = (eligible.by_fair_share, eligible.by_guarantee)
        return (job.team, job.gpu_types, *flags, self.ledger.changes)

    def capacity_grew(self) -> None:
        """GPUs were given back (a nomination given up): nodes may free more than they could."""
        self._short.clear()
        self._by_teams.clear()

    def rank(self, job: PendingJob, level: int) -> tuple:
        """How a pending job ranks against its own team's running jobs: it may preempt
        those of a higher (worse) rank (``Eligibility``)."""
        if self.policy.order == "srtf":
            return (-job.priority, self.remaining.get(job.job_id, 0.0))
        return (-job.priority, level)

    def take(self, choice: Choice) -> None:
        for victim in choice.victims:
            self.taken.add(victim.job_id)

    def _one_task(
        self, job: PendingJob, demand: Demand, where: Where, eligible: Eligibility
    ) -> Choice | None:
        best: tuple[VictimCost, list[RunningJob]] | None = None
        examined = 0
        whole = demand.whole
        # the most GPUs a node walked could free, while none could free enough
        most = [0]
        for node, floor in self._best_nodes(job, demand, where, eligible, most):
            if best is not None:
                if not best[0].any or floor >= best[0]:
                    break  # neither this node nor any after it can cost less
                bound = self._bound(node.name, job.team)
                if bound is not None and bound >= best[0]:
                    continue  # no choice on this node can cost less than the best so far
            usable = [c for c in self._sorted_on(node.name, job.team) if eligible(c)]
            if whole:
                freeable = _freeable(node, usable, whole)
                if freeable < whole:  # not even all its usable victims free enough
                    most[0] = max(most[0], freeable)
                    continue
                most[0] = whole  # a node could: the walk tells nothing of larger jobs
            examined += 1
            victims = _victims_on(self.capacity, node, usable, demand, where, eligible)
            if victims is not None:
                cost = VictimCost.of(victims, job.team)
                if best is None or cost < best[0]:
                    best = (cost, victims)
            if examined >= MAX_NODES_EXAMINED:
                return Choice(best[1]) if best is not None else None
        if best is not None:
            return Choice(best[1])
        if whole and most[0] < whole and where.node_ok is None:  # every node walked, none could
            key = self._short_key(job, eligible)
            self._short.setdefault(key, Frontier()).add(eligible.rank, (most[0] + 1,))
        return None

    # -- what a node could free, by the teams and sizes of its possible victims -----------------

    def _reclaimable(self, job: PendingJob, eligible: Eligibility) -> list[tuple[str, float, list]]:
        """The parts of other teams' jobs (``_team_by_size``) a reclaim by ``job`` may take
        from, as (team, GPUs, part): those of teams it may take from, no bigger than such a
        team may lose (none when it may not reclaim)."""
        if not eligible.reclaim:
            return []
        pairs = self._pairs()  # the teams with possible victims, and their least
        least = self._least
        parts: list[tuple[str, float, list]] = []
        for team in pairs:
            if team == job.team or not eligible.team_possible(team, least[team]):
                continue
            for gpus, part in self._team_by_size(team):
                if not eligible.may_take_of(team, gpus, 0.0):
                    break  # none bigger either
                parts.append((team, gpus, part))
        return parts

    def _takeable(self, job: PendingJob, reclaimable: list[tuple[str, float, list]]) -> tuple:
        """What ``job`` may take, or more: (the teams any of whose jobs it may take, the
        (team, GPUs) of the other teams' jobs it may take). A stopping job it may always."""
        teams = frozenset((job.team,)) if self.policy.las_preemption else frozenset()
        return teams, frozenset((team, gpus) for team, gpus, _ in reclaimable)

    def _held_by_candidates(
        self, node: NodeState
    ) -> list[tuple[tuple[tuple[str, float], ...], float, GpuState]]:
        """The node's GPUs its possible victims hold, each with the (team, GPUs) of those
        that are not stopping and the share they all hold together (those not taken when
        first asked: victims taken since count, which only makes ``_freeable_by_teams``
        larger)."""
        found = self._held_on.get(node.name)
        if found is None:
            name, by_uuid, taken = node.name, node.by_uuid, self.taken
            held: dict[str, list] = {}
            for candidate in self.by_node.get(name, ()):
                if candidate.job_id in taken:  # such as stopping for a nominated job
                    continue
                holder = () if candidate.stopping else ((candidate.team, candidate.gpus),)
                for allocation in candidate.allocations:
                    if allocation.node != name:
                        continue
                    for part in allocation.gpus:
                        entry = held.get(part.uuid)
                        if entry is None:
                            held[part.uuid] = [holder, part.share]
                        else:
                            entry[0] += holder
                            entry[1] += part.share
            found = self._held_on[name] = [
                (holders, share, by_uuid[uuid])
                for uuid, (holders, share) in held.items()
                if uuid in by_uuid  # a GPU the node no longer reports frees nothing
            ]
        return found

    def _freeable_by_teams(self, node: NodeState, takeable: tuple) -> int:
        """No fewer than ``_freeable`` of the node for any victims a job may take
        (``_takeable``): the GPUs free now and those held only by jobs it may take (one
        holding a share of the GPU that is no possible victim, such as a job that may not
        be preempted or one placed in this cycle, keeps it taken). It stays no fewer for the
        rest of the cycle, as capacity shrinks and victims are taken, until capacity grows
        (``capacity_grew``): the cycle keeps it by what is takeable and node."""
        teams, sizes = takeable
        room = node.free_count
        for holders, share, gpu in self._held_by_candidates(node):
            if (
                not gpu.free
                and gpu.used_share - share <= SHARE_EPSILON + 1e-9
                and all(team in teams or (team, gpus) in sizes for team, gpus in holders)
            ):
                room += 1
        return room

    def _in_turn(
        self,
        job: PendingJob,
        eligible: Eligibility,
        reclaimable: list[tuple[str, float, list]] | None = None,
    ) -> Iterator[tuple[int, NodeState, RunningJob, bool]]:
        """The (candidate, node) pairs that may hold an eligible candidate for ``job``, in
        ``RunningJob.key(job.team)`` order (then node rank), each with whether the
        candidate is of the job's own team: the stopping ones, then other teams' (those a
        reclaim may take from: ``_reclaimable``, unless given), then its own team's, a
        merge of the cycle's orders."""
        policy = self.policy
        taken = self.taken  # stopping jobs whose GPUs are nominated to a job are taken
        yield from (
            (e[1], e[2], e[3], False) for e in self._stopping(job.team) if e[3].job_id not in taken
        )
        if reclaimable is None:
            reclaimable = self._reclaimable(job, eligible)
        if reclaimable:
            lists = [part for _, _, part in reclaimable]
            others = lists[0] if len(lists) == 1 else heapq.merge(*lists)
            yield from ((e[1], e[2], e[3], False) for e in others)
        if not policy.las_preemption:
            return
        # the own team's jobs come by (priority, -level): past the first that J does not
        # outrank by (priority, level), none is eligible (not so for "srtf")
        ordered_rank = policy.order != "srtf"
        jrank = eligible.rank
        for _, rank, node, candidate in self._team_order(job.team):
            if ordered_rank and not jrank < (-candidate.priority, candidate.level):
                return
            yield rank, node, candidate, True

    def _best_nodes(
        self,
        job: PendingJob,
        demand: Demand,
        where: Where,
        eligible: Eligibility,
        most: list[int],
    ) -> Iterator[tuple[NodeState, VictimCost]]:
        """The nodes allowed for the job that hold an eligible candidate, by their best
        eligible candidate's key (then rank): a merge of the cycle's candidate order, not a
        sort per job (``_one_task`` examines ``MAX_NODES_EXAMINED`` of them at most). Each
        comes with a floor of ``VictimCost`` for it and every node after it: the candidates come
        in key order, so a node's victims are all at or past the one that brought it (the
        same (priority, level), then no less work lost each, or a worse one).

        For a whole-GPU job, a node whose possible victims of the teams it may take from
        could not free enough (``_freeable_by_teams``) is passed over before its victims are
        worked out; ``most[0]``: the most such a node could free."""
        types = where.types
        whole = demand.whole
        reclaimable = self._reclaimable(job, eligible)
        takeable = self._takeable(job, reclaimable) if whole else ()
        known = self._by_teams.setdefault(takeable, {})
        seen: set[int] = set()
        for rank, node, candidate, is_own in self._in_turn(job, eligible, reclaimable):
            if rank in seen:
                continue
            freeable = known.get(rank) if whole else None
            if freeable is not None and freeable < whole:  # no test of its candidates
                seen.add(rank)
                most[0] = max(most[0], freeable)
                continue
            if not eligible(candidate):
                continue
            seen.add(rank)
            if types and not where.node_allowed(node, demand):
                continue
            if whole:
                if freeable is None:
                    freeable = known[rank] = self._freeable_by_teams(node, takeable)
                if freeable < whole:
                    most[0] = max(most[0], freeable)
                    continue
            yield node, VictimCost.floor(candidate, is_own)

    def _gang(
        self, job: PendingJob, demand: Demand, where: Where, eligible: Eligibility
    ) -> Choice | None:
        """Victims in ``RunningJob.key`` order until the gang's tasks fit (those on nodes
        out of the pool free nothing it can use, and are not taken)."""
        with self.capacity.removal() as removal:
            slots = _GangSlots(self.capacity, demand, where, removal)
            if slots.total >= job.tasks:
                return None  # it fits without victims: the placement failed for another reason
            chosen: list[RunningJob] = []
            losses = eligible.losses()
            seen: set[int] = set()
            for _, _, candidate, _ in self._in_turn(job, eligible):
                if candidate.job_id in seen:
                    continue
                seen.add(candidate.job_id)
                if not eligible(candidate) or not losses.add(candidate):
                    continue
                slots.release(candidate)
                chosen.append(candidate)
                if slots.total >= job.tasks:
                    return Choice([victim for victim in chosen if slots.helped(victim)])
        return None


def _freeable(node: NodeState, usable: list[RunningJob], whole: int) -> int:
    """How many GPUs of the node could be free once every job of ``usable`` ended, up to
    ``whole`` (no fewer when it is more): at most those free now and those whose every
    share the jobs hold (a GPU shared with a job that is not usable, or placed on in this
    cycle, stays taken). A bound: cheaper than ``_victims_on``, which would find none when
    it is below ``whole``."""
    room = node.free_count
    if room >= whole:
        return room
    name = node.name
    freed: dict[str, float] = {}
    for victim in usable:
        for allocation in victim.allocations:
            if allocation.node == name:
                for part in allocation.gpus:
                    freed[part.uuid] = freed.get(part.uuid, 0.0) + part.share
    by_uuid = node.by_uuid
    for uuid, share in freed.items():
        gpu = by_uuid.get(uuid)
        # the margin: ``GpuState.unhold`` subtracts the shares one by one
        if gpu is not None and not gpu.free and gpu.used_share - share <= SHARE_EPSILON + 1e-9:
            room += 1
            if room >= whole:
                return room
    return room


def _victims_on(
    capacity: FreeCapacity,
    node: NodeState,
    usable: list[RunningJob],
    demand: Demand,
    where: Where,
    eligible: Eligibility,
) -> list[RunningJob] | None:
    """The victims (in order) after whose end ``demand`` fits ``node``, fewest kept."""
    chosen: list[RunningJob] = []
    losses = eligible.losses()
    with capacity.removal() as removal:
        for victim in usable:
            if not losses.add(victim):
                continue
            removal.remove(node, victim.allocations)
            chosen.append(victim)
            if fits_free(node, demand, where):
                break
        else:
            return None
    return _pruned(capacity, node, chosen, demand, where)


def _pruned(
    capacity: FreeCapacity,
    node: NodeState,
    chosen: list[RunningJob],
    demand: Demand,
    where: Where,
) -> list[RunningJob]:
    """Drop victims (latest, i.e. costliest, first) whose end the demand does not need."""
    kept = list(chosen)
    for victim in reversed(chosen[:-1]):
        trial = [other for other in kept if other is not victim]
        with capacity.removal() as removal:
            for other in trial:
                removal.remove(node, other.allocations)
            if fits_free(node, demand, where):
                kept = trial
    return kept


class _GangSlots:
    """How many tasks of a whole-GPU gang fit, node by node, as victims are removed (from
    the capacity, until ``removal`` is restored)."""

    def __init__(self, capacity: FreeCapacity, demand: Demand, where: Where, removal: Removal):
        self.capacity = capacity
        self.demand = demand
        self.where = where
        self.removal = removal
        self.slots: dict[str, int] = {}
        self.before: dict[str, int] = {}
        self.total = 0
        for node in capacity.nodes_by_free_count(demand.whole):
            if where.types and not where.node_allowed(node, demand):
                continue
            self.slots[node.name] = self._count(node)
            self.total += self.slots[node.name]

    def _count(self, node: NodeState) -> int:
        demand = self.demand
        by_gpus = len(whole_gpus_on(node, demand, self.where)) // demand.whole
        by_cpus = int(node.cpus // demand.cpus) if demand.cpus > 0 else by_gpus
        by_memory = int(node.memory_bytes // demand.memory) if demand.memory else by_gpus
        return max(0, min(by_gpus, by_cpus, by_memory))

    def release(self, victim: RunningJob) -> None:
        """Count the victim's GPUs and host resources as free."""
        for name in {allocation.node for allocation in victim.allocations}:
            node = self.capacity.by_name.get(name)
            if node is None or (
                self.where.types and not self.where.node_allowed(node, self.demand)
            ):
                continue
            if name not in self.before:
                self.before[name] = self.slots.get(name, 0)
            self.removal.remove(node, victim.allocations)
            count = self._count(node)
            self.total += count - self.slots.get(name, 0)
            self.slots[name] = count

    def helped(self, victim: RunningJob) -> bool:
        """Whether the victim is on a node where tasks now fit that did not before."""
        return any(
            self.slots.get(a.node, 0) > self.before.get(a.node, 0) for a in victim.allocations
        )
