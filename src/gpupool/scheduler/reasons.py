"""Phase 4: a reason for every job left pending, and the submit-time size check.

Most reasons are decided while the cycle runs (``Blocked``: the team's limit, the
guarantee rule for non-preemptible work, a reservation, victims to wait for, a strict queue).
A job that simply did not fit is explained once, after placement, against the capacity
left: capacity only shrinks during a cycle, so a job that did not fit when it was tried does
not fit at the end either. Requests of one shape share one answer. Blockers add what else
stands in the way: the gang's size, the GPU type, fragmentation, teams above their share.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.scheduler.backfill import Reservation
from gpupool.scheduler.capacity import FreeCapacity, NodeState
from gpupool.scheduler.fit import (
    CPU_EPSILON,
    Demand,
    DemandCache,
    demand_of,
    fraction_demand,
    model_matches,
    whole_gpus_on,
)
from gpupool.scheduler.ledger import EPSILON, Ledger
from gpupool.scheduler.messages import (
    CPU_HINT,
    MEMORY_HINT,
    NO_NODES_MESSAGE,
    cpu_need,
    format_share,
    gpu_need,
    no_nodes_message,
    plural,
    size_message,
    waiting_message,
)
from gpupool.scheduler.ordering import QueuedJob
from gpupool.scheduler.shortfall import ShortfallFinder
from gpupool.scheduler.state import SchedulerState
from gpupool.scheduler.types import (
    SHARE_EPSILON,
    Allocation,
    GpuCapacity,
    NodeCapacity,
    PendingReason,
    Snapshot,
)

# Used only if a job that was not placed turns out to fit, which placement rules out.
UNPLACED_MESSAGE = "was not placed in this cycle"


@dataclass(slots=True)
class Blocked:
    """Why the cycle left a job pending, when it knew (``code`` None: it did not fit)."""

    code: Reason | None
    reservation: Reservation | None = None
    victims: list = field(default_factory=list)
    behind: int | None = None
    teams: list[str] = field(default_factory=list)  # FAIR_SHARE: teams the GPUs are kept for
    tries: int = 0  # QUEUED, not tried: the jobs of its user ahead of it that could not start


def infeasible_reason(
    request: ResourceRequest, nodes: Sequence[NodeCapacity], gpu_types: tuple[str, ...] = ()
) -> str | None:
    """Why no node of ``nodes`` could run ``request`` even if empty; None if one could.

    Every node given counts, whatever its ``schedulable`` flag: pass the nodes to judge by.
    An empty pool judges nothing (None): nodes may yet join.
    """
    if not nodes:
        return None
    if gpu_types and request.uses_gpus:
        typed = typed_nodes(nodes, gpu_types)
        if not any(node.gpus for node in typed):
            return no_type_message(gpu_types, nodes)
        nodes = typed
    demand = demand_of(request)
    shortfall = ShortfallFinder(FreeCapacity(nodes)).find(demand)
    return None if shortfall is None else size_message(demand, shortfall)


def typed_nodes(nodes: Sequence[NodeCapacity], types: tuple[str, ...]) -> list[NodeCapacity]:
    """The nodes with only their GPUs of the given types."""
    return [
        NodeCapacity(
            node.name,
            tuple(gpu for gpu in node.gpus if model_matches(types, gpu.model)),
            node.cpus,
            node.memory_bytes,
            node.schedulable,
            node.drained,
        )
        for node in nodes
    ]


def no_type_message(types: tuple[str, ...], nodes: Sequence[NodeCapacity]) -> str:
    models = sorted({gpu.model for node in nodes for gpu in node.gpus})
    known = ", ".join(models) if models else "none"
    return f"no GPU in the pool is of type {' or '.join(types)} (models here: {known})"


def empty_capacity(nodes: Sequence[NodeCapacity], state: SchedulerState) -> FreeCapacity:
    """The capacity of ``nodes`` with nothing held (not to be changed: it is kept on the
    state while the nodes are the same, and explanations only read it)."""
    nodes = tuple(nodes)
    kept = state.empty
    if kept is not None and (kept[0] is nodes or kept[0] == nodes):
        return kept[1]
    capacity = FreeCapacity(nodes, (), state)
    state.empty = (nodes, capacity)
    return capacity


class Explainer:
    """Reasons against the capacity left after placement and against the empty nodes."""

    def __init__(self, capacity: FreeCapacity, schedulable: Sequence[NodeCapacity]):
        self._has_nodes = bool(capacity.nodes)
        self._capacity = capacity
        self._now = ShortfallFinder(capacity)
        self._empty_capacity = empty_capacity(schedulable, capacity.state) if schedulable else None
        self._empty = ShortfallFinder(self._empty_capacity) if schedulable else None
        self._demands = DemandCache()
        self._memo: dict[int, tuple[Reason, str]] = {}  # by id: the cache makes one per shape
        self._gangs: dict[tuple[int, int], tuple[Reason, str]] = {}

    def gang_reason(
        self, request: ResourceRequest, tasks: int, distinct: bool = False
    ) -> tuple[Reason, str]:
        """Why a gang of ``tasks`` tasks of ``request`` waits: the pool, or the free capacity
        now, has room for fewer of its tasks at once than it has. ``distinct``: each task
        needs a node of its own (a job over several nodes)."""
        demand = self._demands.of(request)
        key = (id(demand), tasks, distinct)
        found = self._gangs.get(key)
        if found is None:
            found = self._gangs[key] = self._gang_reason(demand, tasks, distinct)
        return found

    def _gang_reason(self, demand: Demand, tasks: int, distinct: bool) -> tuple[Reason, str]:
        code, message = self.reason_of(demand)
        need = gpu_need(demand) if demand.uses_gpus else cpu_need(demand)
        gang = f"a gang of {tasks} tasks, each of {need}"
        if code in (Reason.NO_NODES, Reason.NO_NODE_BIG_ENOUGH) or self._empty_capacity is None:
            return code, f"a gang of {tasks} tasks, each {message}"
        most = gang_slots(self._empty_capacity, demand, distinct)
        if most.total < tasks:
            return Reason.NO_NODE_BIG_ENOUGH, never_together(gang, most.total, distinct)
        if code is not Reason.QUEUED:  # not even one task fits now
            return code, f"a gang of {tasks} tasks, each {message}"
        now = gang_slots(self._capacity, demand, distinct)
        if now.total >= tasks:
            return Reason.QUEUED, (
                f"{gang}: the free GPUs hold all its tasks only where they are reserved for "
                "jobs waiting longer, or kept for teams below their guarantee"
            )
        short = Reason.INSUFFICIENT_GPUS if now.by_gpus < tasks else Reason.INSUFFICIENT_CPU
        if short is Reason.INSUFFICIENT_CPU and now.by_cpus >= tasks:
            short = Reason.INSUFFICIENT_MEMORY
        where = ", ".join(f"{count} on {name}" for name, count in now.nodes[:3])
        room = f" ({where}{', ...' if len(now.nodes) > 3 else ''})" if now.nodes else ""
        hint = {Reason.INSUFFICIENT_CPU: CPU_HINT, Reason.INSUFFICIENT_MEMORY: MEMORY_HINT}
        return short, (
            f"{gang}, needs room for all {tasks} at once; the free capacity holds "
            f"{now.total} such {plural(now.total, 'task')}{room}"
            + (f"; {hint[short]}" if short in hint else "")
        )

    def reason_of(self, demand: Demand) -> tuple[Reason, str]:
        found = self._memo.get(id(demand))
        if found is None:
            found = self._memo[id(demand)] = self._reason(demand)
        return found

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


class Explanations:
    """Reasons for the jobs one cycle left pending."""

    def __init__(
        self,
        capacity: FreeCapacity,
        snapshot: Snapshot,
        ledger: Ledger,
        placed: Sequence[Allocation],
    ) -> None:
        self.capacity = capacity
        self.snapshot = snapshot
        self.ledger = ledger
        self.placed = placed
        self.schedulable = [node for node in snapshot.nodes if node.schedulable]
        self._free: int | None = None
        self._over: dict[str, str | None] = {}
        self.explainers: dict[tuple[str, ...], Explainer | None] = {
            (): Explainer(capacity, self.schedulable)
        }
        self._said: dict[tuple, tuple[Reason, str, tuple[str, ...], float | None]] = {}

    def explainer(self, types: tuple[str, ...]) -> Explainer | None:
        """The explainer over the GPUs of ``types`` (None: the pool has no such GPU)."""
        if types not in self.explainers:
            nodes = typed_nodes(self.schedulable, types)
            if not any(node.gpus for node in nodes):
                self.explainers[types] = None
            else:
                held = list(self.snapshot.allocations) + list(self.placed)
                capacity = FreeCapacity(nodes, held, self.capacity.state)
                self.explainers[types] = Explainer(capacity, nodes)
        return self.explainers[types]

    def explain(self, queued: QueuedJob, blocked: Blocked | None) -> PendingReason:
        job = queued.job
        if blocked is None or (blocked.code is None and blocked.reservation is None):
            # what is said of a job left to the explainer depends on its team and shape alone
            request = job.request
            key = (
                job.team,
                request.gpus,
                request.gpu_memory_bytes,
                request.cpus,
                request.memory_bytes,
                job.tasks,
                job.distinct_nodes,
                job.gpu_types,
            )
            found = self._said.get(key)
            if found is None:
                found = self._said[key] = self._explain(queued, blocked)
            code, message, blockers, eta = found
        else:
            code, message, blockers, eta = self._explain(queued, blocked)
        return PendingReason(job.job_id, code, message, queued.position, blockers, eta)

    def _explain(
        self, queued: QueuedJob, blocked: Blocked | None
    ) -> tuple[Reason, str, tuple[str, ...], float | None]:
        job = queued.job
        blockers = self.blockers(queued, blocked)
        eta = None
        if blocked is not None and blocked.code is not None:
            code, message = self.decided(queued, blocked)
        else:
            types = job.gpu_types if job.request.uses_gpus else ()
            explainer = self.explainer(types)
            if not self.schedulable:  # whatever it asks for: no node takes new work
                code, message = Reason.NO_NODES, no_nodes_message(self.snapshot.nodes)
            elif explainer is None:
                code, message = Reason.NO_GPU_OF_TYPE, no_type_message(types, self.schedulable)
            else:
                if job.tasks > 1:
                    code, message = explainer.gang_reason(
                        job.request, job.tasks, job.distinct_nodes
                    )
                else:
                    code, message = explainer.reason(job.request)
                code, message = self.fair_share(job, code, message)
            if blocked is not None and blocked.reservation is not None:
                eta = blocked.reservation.at
        return code, message, blockers, eta

    def decided(self, queued: QueuedJob, blocked: Blocked) -> tuple[Reason, str]:
        job, ledger = queued.job, self.ledger
        code = blocked.code
        if code is Reason.OVER_QUOTA:
            held, limit = ledger.held[job.team], ledger.limit(job.team)
            return code, (
                f"team {job.team} holds {_gpus(held)} of its limit of {_gpus(limit)}; this job "
                f"needs {_gpus(ledger.gpus(job))} more"
            )
        if code is Reason.ARRAY_LIMIT:  # the same words while it waits: recorded once
            limit = job.array_limit
            return code, (
                f"array {job.array_id} runs at most {limit} of its tasks at once (%{limit}) and "
                "that many are starting or running; this task starts when one of them ends"
            )
        if code is Reason.NOT_GUARANTEED:
            guarantee = ledger.guarantee(job.team)
            return code, (
                f"non-preemptible jobs run within their team's guarantee ({_gpus(guarantee)} for "
                f"{job.team}, {_gpus(ledger.held[job.team])} held) or on GPUs nobody is "
                "guaranteed, and neither has room; submit it as preemptible or ask for a larger "
                "guarantee"
            )
        if code is Reason.RESERVED:
            reservation = blocked.reservation
            assert reservation is not None
            holder = (
                f"job {reservation.job_id}"
                if reservation.team == job.team
                else f"a job of team {reservation.team}"
            )
            return code, (
                f"it fits on {reservation.node}, but those GPUs are reserved for {holder} "
                f"from {_clock(reservation.at)}; with a --max-runtime that ends before then it "
                "could start now"
            )
        if code is Reason.FAIR_SHARE:
            teams = ", ".join(blocked.teams)
            return code, (
                f"it needs {_gpus(ledger.gpus(job))}, beyond team {job.team}'s guarantee "
                f"({_gpus(ledger.guarantee(job.team))}, {_gpus(ledger.held[job.team])} held), "
                f"and the free GPUs are kept for {plural(len(blocked.teams), 'team')} {teams}, "
                "below their guarantee"
            )
        if code is Reason.PREEMPTING:
            return code, f"waiting for {victims_text(blocked.victims, job.team)} to stop"
        if blocked.tries:
            fifo = self.snapshot.policy.order == "fifo"
            whose = "in the queue" if fifo else f"of user {job.user}"
            return Reason.QUEUED, (
                f"not tried in this cycle: {blocked.tries} {plural(blocked.tries, 'job')} "
                f"{whose} ahead of it could not start (job {blocked.behind} first), and a "
                "cycle tries no more of a user's jobs after that many; it is tried as those "
                "start or leave"
            )
        return Reason.QUEUED, f"waits behind job {blocked.behind}, which does not fit yet"

    def fair_share(self, job, code: Reason, message: str) -> tuple[Reason, str]:  # noqa: ANN001
        """A team at or above its fair share waits for others first: say so."""
        ledger = self.ledger
        if code not in (Reason.INSUFFICIENT_GPUS, Reason.INSUFFICIENT_GPU_MEMORY):
            return code, message
        if self.snapshot.policy.order == "fifo":  # one queue in submit order: no fair share
            return code, message
        fair = ledger.fair.get(job.team, 0.0)
        if ledger.within_fair_share(job.team, ledger.gpus(job)):
            return code, message
        behind = [
            team
            for team, wanted in ledger.demand.items()
            if team != job.team
            and wanted > ledger.held[team] + EPSILON
            and ledger.held[team] < ledger.fair.get(team, 0.0) - EPSILON
        ]
        if not behind:
            return code, message
        return Reason.FAIR_SHARE, (
            f"{message}; team {job.team} holds {_gpus(ledger.held[job.team])}, its fair share "
            f"now is {_gpus(fair)}, so GPUs that free up go first to "
            f"{', '.join(sorted(behind)[:3])}"
        )

    def _free_count(self) -> int:
        """Wholly free GPUs left (the capacity no longer changes while jobs are explained)."""
        if self._free is None:
            self._free = sum(node.free_count for node in self.capacity.nodes)
        return self._free

    def _fair_share_blocker(self, team: str) -> str | None:
        """The teams other than ``team`` above their fair share, as a blocker (None: none)."""
        ledger = self.ledger
        if self.snapshot.policy.order == "fifo":
            return None
        over = [
            other
            for other, held in ledger.held.items()
            if other != team and held > ledger.fair.get(other, 0.0) + EPSILON
        ]
        if not over:
            return None
        return "fair share: " + ", ".join(
            f"team {other} holds {_gpus(ledger.held[other])} (share "
            f"{_gpus(ledger.fair.get(other, 0.0))})"
            for other in sorted(over)[:3]
        )

    def blockers(self, queued: QueuedJob, blocked: Blocked | None) -> tuple[str, ...]:
        job, ledger = queued.job, self.ledger
        found: list[str] = []
        if job.tasks > 1:
            found.append(f"gang: all {job.tasks} tasks must start together")
        if job.gpu_types:
            found.append(f"GPU type: only {' or '.join(job.gpu_types)}")
        limit = ledger.limit(job.team)
        if limit != float("inf"):
            found.append(
                f"quota: team {job.team} holds {_gpus(ledger.held[job.team])} of its limit "
                f"{_gpus(limit)} (guarantee {_gpus(ledger.guarantee(job.team))})"
            )
        whole = job.request.whole_gpus
        if whole:
            free = self._free_count()
            if free >= whole * job.tasks and self.capacity.largest_free_block() < whole:
                found.append(
                    f"fragmentation: {free} GPUs are free but no node has {whole} free together"
                )
        over = self._over.get(job.team, False)
        if over is False:
            over = self._over[job.team] = self._fair_share_blocker(job.team)
        if over is not None:
            found.append(over)
        if blocked is not None and blocked.reservation is not None and blocked.code is None:
            reservation = blocked.reservation
            found.append(
                f"reservation: {reservation.node} is held for it from {_clock(reservation.at)}"
            )
        return tuple(found)


def never_together(gang: str, most: int, distinct: bool) -> str:
    """A gang larger than the empty pool holds at once: how many of its tasks it holds."""
    if distinct:
        return (
            f"{gang}, each on a node of its own, can never start together: only {most} "
            f"schedulable {plural(most, 'node')} can hold such a task, even empty"
        )
    return (
        f"{gang}, can never start together: the pool holds at most {most} such "
        f"{plural(most, 'task')} at once, even empty"
    )


@dataclass(slots=True)
class GangSlots:
    """How many tasks of one shape the capacity holds at once, and what limits them."""

    total: int = 0
    by_gpus: int = 0  # counting GPUs alone
    by_cpus: int = 0  # counting GPUs and CPUs
    nodes: list[tuple[str, int]] = field(default_factory=list)  # (node, tasks), most first


def gang_slots(capacity: FreeCapacity, demand: Demand, distinct: bool = False) -> GangSlots:
    """The tasks of ``demand`` each node of ``capacity`` holds, all nodes together;
    ``distinct``: one task at most per node (a job over several nodes)."""
    slots = GangSlots()
    for node in capacity.nodes:
        gpus = _gpu_slots(node, demand)
        if distinct:
            gpus = min(gpus, 1)
        cpus = int((node.cpus + CPU_EPSILON) // demand.cpus) if demand.cpus > 0 else gpus
        memory = int(node.memory_bytes // demand.memory) if demand.memory else cpus
        count = max(0, min(gpus, cpus, memory))
        slots.by_gpus += max(0, gpus)
        slots.by_cpus += max(0, min(gpus, cpus))
        slots.total += count
        if count:
            slots.nodes.append((node.name, count))
    slots.nodes.sort(key=lambda entry: -entry[1])
    return slots


def _gpu_slots(node: NodeState, demand: Demand) -> int:
    if demand.whole:
        return len(whole_gpus_on(node, demand)) // demand.whole
    if not demand.fractional:
        return 1 << 30  # no GPU: only CPUs and memory count
    count = 0
    for gpu in node.gpus:
        if gpu.whole:
            continue
        share, memory = fraction_demand(demand, gpu)
        by_share = int((1.0 - gpu.used_share + SHARE_EPSILON) // share) if share > 0 else 1 << 30
        by_memory = (gpu.memory_bytes - gpu.used_memory) // memory if memory else 1 << 30
        count += max(0, min(by_share, by_memory))
    return count


def explain_unplaced(
    unplaced: Sequence[QueuedJob],
    blocked: dict[int, Blocked],
    capacity: FreeCapacity,
    snapshot: Snapshot,
    ledger: Ledger,
    placed: Sequence[Allocation] = (),
) -> dict[int, PendingReason]:
    """Phase 4: the reason, team-queue position and blockers of each job not placed."""
    if not unplaced:
        return {}
    explanations = Explanations(capacity, snapshot, ledger, placed)
    return {
        queued.job.job_id: explanations.explain(queued, blocked.get(queued.job.job_id))
        for queued in unplaced
    }


def _gpus(count: float) -> str:
    shown = format_share(count)
    return f"{shown} {plural(float(shown), 'GPU')}"


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


__all__ = ["Blocked", "Explainer", "GpuCapacity", "explain_unplaced", "infeasible_reason"]


def victims_text(victims: Sequence, team: str) -> str:  # Sequence[RunningJob]
    """The jobs a waiting job of ``team`` waits for: its own team's by id, another team's
    counted by team only (a team never learns the ids of jobs it cannot see)."""
    own = [str(victim.job_id) for victim in victims if victim.team == team]
    parts = [f"{plural(len(own), 'job')} {', '.join(own)}"] if own else []
    others = Counter(victim.team for victim in victims if victim.team != team)
    parts += [f"{n} {plural(n, 'job')} of team {name}" for name, n in sorted(others.items())]
    return " and ".join(parts)
