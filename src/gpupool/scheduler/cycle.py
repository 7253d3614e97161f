"""One scheduling cycle: a pure function of a snapshot (and a clock).

1. Free capacity: the nodes minus what allocations hold (``capacity``).
2. Order: teams in fair-share turns, users by decayed usage, jobs by priority and
   least-attained-service level (``ordering``), kept current as jobs are placed.
3. For each job in turn: the team's limit (``ledger``); non-preemptible work only where a
   guarantee cannot be needed back; best-fit placement of all its tasks or none
   (``placement``), off the spots reserved for earlier blocked jobs (``backfill``); if it
   does not fit, victims whose end lets it start (``preemption``); if none, the first
   blocked job of its queue reserves the spot that frees first. A job that would borrow
   beyond its team's guarantee the free GPUs that teams below their guarantee may still
   claim in this cycle waits until their jobs have been tried, then tries again.
4. Explain every job left pending: reason code, message, position, blockers (``reasons``).
"""

from __future__ import annotations

from gpupool.domain.jobs import Reason
from gpupool.scheduler.backfill import Reservation, Reservations
from gpupool.scheduler.capacity import FreeCapacity, build_capacity
from gpupool.scheduler.fit import Demand, DemandCache, Where
from gpupool.scheduler.ledger import EPSILON, Ledger
from gpupool.scheduler.ordering import QueuedJob, Queues
from gpupool.scheduler.placement import find_spot, place_tasks, unplace
from gpupool.scheduler.preemption import Choice, Preemptor, running_jobs
from gpupool.scheduler.reasons import Blocked, explain_unplaced
from gpupool.scheduler.types import Allocation, Clock, Decisions, Preemption, Snapshot


def schedule(snapshot: Snapshot, clock: Clock) -> Decisions:
    """Decide which pending jobs start where, which running jobs yield, and why others wait."""
    return Cycle(snapshot, clock.now()).run()


class Cycle:
    """The state of one cycle (everything here lives for one call of ``schedule``)."""

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.snapshot = snapshot
        self.now = now
        self.policy = policy = snapshot.policy
        self.capacity: FreeCapacity = build_capacity(snapshot.nodes, snapshot.allocations)
        pool_gpus = float(sum(len(node.gpus) for node in self.capacity.nodes))
        memories = {gpu.memory_bytes for node in self.capacity.nodes for gpu in node.gpus}
        self.ledger = Ledger(
            snapshot.quotas, snapshot.allocations, snapshot.pending, pool_gpus, memories
        )
        self.free_gpus = sum(gpu.free_share for node in self.capacity.nodes for gpu in node.gpus)
        self.queues = Queues(
            snapshot.pending,
            self.ledger,
            policy,
            now,
            snapshot.usage,
            snapshot.weights,
            snapshot.remaining,
        )
        preempts = policy.reclaim or policy.las_preemption
        running = (
            running_jobs(snapshot.allocations, policy, now, snapshot.remaining) if preempts else {}
        )
        self.preemptor = Preemptor(
            running, self.capacity, self.ledger, policy, now, snapshot.remaining
        )
        self.reservations = (
            Reservations(snapshot.allocations, now)
            if policy.backfill and policy.skip_blocked
            else None
        )
        self.decisions = Decisions()
        self.blocked: dict[int, Blocked] = {}
        self.unplaced: list[QueuedJob] = []
        self.demands = DemandCache()
        self.failed: set[tuple] = set()  # placements that did not fit (capacity only shrinks)
        self.no_victims: set[tuple] = set()
        self.reserved_teams: set[str] = set()
        self.deferred: list[QueuedJob] = []  # borrowers waiting for guaranteed teams' turns

    def run(self) -> Decisions:
        for queued in self.queues:
            self.consider(queued)
            if not self.policy.explain and self._nothing_left_to_do():
                break
        deferred, self.deferred = self.deferred, []
        for queued in deferred:
            self.consider(queued, last_try=True)
        if self.policy.explain:
            self.unplaced.extend(self.queues.rest())
            placed = [
                Allocation(p.job_id, p.node, p.gpus, p.cpus, p.memory_bytes)
                for p in self.decisions.placements
            ]
            self.decisions.pending = explain_unplaced(
                self.unplaced, self.blocked, self.capacity, self.snapshot, self.ledger, placed
            )
        return self.decisions

    def _nothing_left_to_do(self) -> bool:
        """No free GPU left and no victim left: the rest cannot start in this cycle."""
        capacity = self.capacity
        if capacity.largest_free_block() or capacity.shared:
            return False
        return not self.preemptor.any or len(self.preemptor.taken) >= len(self.preemptor.running)

    def consider(self, queued: QueuedJob, last_try: bool = False) -> None:
        job = queued.job
        ledger = self.ledger
        gpus = ledger.gpus(job)
        if not last_try:
            ledger.tried(job.team, gpus)
        if not ledger.fits_limit(job.team, gpus):
            self._block(queued, Blocked(Reason.OVER_QUOTA))
            return
        if not job.preemptible and not ledger.unpreemptible_fits(job.team, gpus):
            self._block(queued, Blocked(Reason.NOT_GUARANTEED))
            return
        demand = self.demands.of(job.request)
        reservations = self.reservations
        where = reservations.where(job, job.gpu_types) if reservations else Where(job.gpu_types)
        guarded = where.node_ok is not None
        key = (id(demand), job.tasks, job.gpu_types, guarded and job.max_runtime)
        if key not in self.failed:
            placements = place_tasks(job.job_id, job.tasks, demand, self.capacity, where)
            if placements is not None:
                held = sum(part.share for placement in placements for part in placement.gpus)
                kept = self._kept_for_guarantees(job, held)
                if kept:
                    unplace(placements, demand, self.capacity)
                    if last_try:
                        self._block(queued, Blocked(Reason.FAIR_SHARE, teams=kept))
                    else:
                        self.deferred.append(queued)
                        self._hold_back_the_queue(queued)  # strict queues: it stays the head
                    return
                self.decisions.placements.extend(placements)
                self.free_gpus -= held
                ledger.charge(job.team, held, job.preemptible)
                self.queues.charge_user(job)
                if reservations is not None:
                    reservations.note(placements, job)
                return
            self.failed.add(key)
        if self._preempt(queued, demand, where, gpus):
            return
        if guarded:
            reservation = self._reservation_in_the_way(job, demand)
            if reservation is not None:
                self._block(queued, Blocked(Reason.RESERVED, reservation=reservation))
                return
        blocked = Blocked(None)
        if reservations is not None and job.team not in self.reserved_teams:
            self.reserved_teams.add(job.team)
            blocked.reservation = reservations.reserve(
                job, demand, self.capacity, Where(job.gpu_types)
            )
        self._block(queued, blocked)
        self._hold_back_the_queue(queued)

    def _hold_back_the_queue(self, queued: QueuedJob) -> None:
        """Strict queues: the jobs behind a blocked head wait behind it."""
        if not self.policy.skip_blocked:
            for behind in self.queues.drop_team(queued_team(self, queued)):
                self._block(behind, Blocked(Reason.QUEUED, behind=queued.job.job_id))

    def _kept_for_guarantees(self, job, gpus: float) -> list[str]:  # noqa: ANN001
        """The teams below their guarantee whose claim on the free GPUs this job, borrowing
        beyond its own team's guarantee, would cut into (empty: none)."""
        ledger = self.ledger
        if not ledger.untried or self.policy.order == "fifo":  # fifo: one queue, no turns
            return []
        room = max(0.0, ledger.guarantee(job.team) - ledger.held[job.team])
        if gpus <= room + EPSILON:
            return []
        needed, teams = ledger.needed_by_others(job.team)
        if not teams or self.free_gpus - gpus >= needed - EPSILON:
            return []
        return sorted(teams)

    def _reservation_in_the_way(self, job, demand: Demand) -> Reservation | None:  # noqa: ANN001
        """The reservation of the node where the job would fit but for reservations."""
        if job.tasks != 1:
            return None
        claim = find_spot(demand, self.capacity, Where(job.gpu_types))
        if claim is None:
            return None
        reservations = self.reservations
        found = reservations.by_node.get(claim.node.name)
        if found is not None and found.job_id != job.job_id:
            return found
        return next((r for r in reservations.by_node.values() if r.job_id != job.job_id), None)

    def _preempt(self, queued: QueuedJob, demand: Demand, where: Where, gpus: float) -> bool:
        job = queued.job
        if not self.preemptor.any:
            return False
        key = (job.team, id(demand), job.tasks, job.gpu_types, job.priority, queued.level)
        if key in self.no_victims:
            return False
        choice = self.preemptor.find(job, queued.level, demand, Where(job.gpu_types))
        if choice is None:
            self.no_victims.add(key)
            return False
        self._apply(job, choice, gpus)
        self._block(queued, Blocked(Reason.PREEMPTING, victims=choice.victims))
        return True

    def _apply(self, job, choice: Choice, gpus: float) -> None:  # noqa: ANN001
        self.preemptor.take(choice)
        self.ledger.charge(job.team, gpus, job.preemptible)
        for victim in choice.victims:
            if victim.stopping:
                continue
            self.ledger.refund(victim.team, victim.gpus, victim.preemptible)
            self.queues.rekey(victim.team)
            self.decisions.preemptions.append(
                Preemption(victim.job_id, job.job_id, *preemption_reason(job, victim))
            )

    def _block(self, queued: QueuedJob, blocked: Blocked) -> None:
        self.blocked[queued.job.job_id] = blocked
        self.unplaced.append(queued)


def queued_team(cycle: Cycle, queued: QueuedJob) -> str:
    return "" if cycle.policy.order == "fifo" else queued.job.team


def preemption_reason(job, victim) -> tuple[Reason, str]:  # noqa: ANN001
    if victim.team != job.team:
        return (
            Reason.PREEMPTED,
            f"preempted for job {job.job_id} of team {job.team}: team {victim.team} is above "
            "its fair share and team "
            f"{job.team} is within its own",
        )
    if victim.priority < job.priority:
        why = f"it has a higher priority ({job.priority} > {victim.priority})"
    else:
        why = "it has received less GPU time (least-attained-service levels)"
    return Reason.PREEMPTED, f"preempted for job {job.job_id} of the same team: {why}"
