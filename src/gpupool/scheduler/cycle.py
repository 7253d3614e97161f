"""One scheduling cycle: a pure function of a snapshot (and a clock).

1. Free capacity: the nodes minus what allocations hold (``capacity``).
2. Order: teams in fair-share turns, users by decayed usage, jobs by priority and
   least-attained-service level (``ordering``), kept current as jobs are placed.
3. For each job in turn: its array's limit of tasks at once (``arrays``); the team's limit
   (``ledger``); non-preemptible work only where a
   guarantee cannot be needed back; best-fit placement of all its tasks or none
   (``placement``), off the spots reserved for earlier blocked jobs (``backfill``); if it
   does not fit, victims whose end lets it start (``preemption``); if none, the first
   blocked job of its queue reserves the spot that frees first. A job that would borrow
   beyond its team's guarantee the free GPUs that teams below their guarantee may still
   claim in this cycle waits until their jobs have been tried, then tries again.
   A job that preempts is nominated to the GPUs its victims free (``nominations``, the
   Kubernetes "nominated node"): from then on nobody else takes those GPUs once free, they go
   back to it when its turn comes, and it preempts nobody more while its victims stop, so
   freed GPUs cannot go to another job (or the victims, queued again) and start a new round.
   What found no room or no victims is remembered (``memo``): a team none of whose jobs
   left could find either sleeps for the rest of the cycle, unless capacity grows.
4. Explain every job left pending: reason code, message, position, blockers (``reasons``),
   unless the snapshot says not to (the server explains at most once a second).
5. Requeue: a job that found neither room nor victims is parked (``parking``) and not
   searched for again until something it waits on changes; the cycle decides the same.

Work is bounded (``Policy.max_starts``, ``Policy.max_tries``): the starts are handed to the
caller as they are decided, a hundred at a time, and a user's jobs are tried no more once
32 of them could not start in the cycle.

What a cycle keeps for the next lives in the caller's ``SchedulerState`` (``state``): the
free capacity (``capacity.leased_capacity``: only nodes whose allocations changed are worked
out again, and a cycle's changes are undone after it, so that each cycle still decides from
its snapshot alone), the users' queues (``ordering.leased_order``: only jobs come, gone or
starved are put in place), the running jobs, and per-object memos.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from gpupool.domain.jobs import Reason
from gpupool.scheduler.arrays import ArrayLimits
from gpupool.scheduler.backfill import Reservation, Reservations
from gpupool.scheduler.capacity import (
    FreeCapacity,
    build_capacity,
    leased_capacity,
)
from gpupool.scheduler.fit import Demand, DemandCache, Where
from gpupool.scheduler.ledger import EPSILON, Ledger
from gpupool.scheduler.locality import Locality
from gpupool.scheduler.memo import Group, NoRoom, NoVictims
from gpupool.scheduler.nominations import Nominations, being_freed
from gpupool.scheduler.ordering import FIFO_TEAM, KeptOrder, QueuedJob, Queues, leased_order
from gpupool.scheduler.packing import Packer
from gpupool.scheduler.parking import Parked
from gpupool.scheduler.placement import find_spot, place_in_one_fabric, place_tasks, unplace
from gpupool.scheduler.preemption import Choice, KeptRunning, Preemptor, leased_running
from gpupool.scheduler.reasons import Blocked, explain_unplaced
from gpupool.scheduler.state import SchedulerState
from gpupool.scheduler.types import (
    Allocation,
    Clock,
    Decisions,
    HandOver,
    PendingJob,
    Preemption,
    Snapshot,
)


def schedule(
    snapshot: Snapshot,
    clock: Clock,
    state: SchedulerState | None = None,
    hand_over: HandOver | None = None,
) -> Decisions:
    """Decide which pending jobs start where, which running jobs yield, and why others wait.

    ``state``: what the caller's cycles keep from one to the next (``SchedulerState``; None:
    a state for this call alone). The decisions are the same with any state, or none.
    ``hand_over``: called, while the cycle goes on, with the placements and preemptions of
    each ``Policy.max_starts`` jobs as soon as they are decided, so that its caller starts
    them at once; the decisions returned then hold the rest. The decisions are the same
    with or without it."""
    state = state if state is not None else SchedulerState()
    now = clock.now()
    policy = snapshot.policy
    with (
        leased_capacity(state, snapshot.nodes, snapshot.allocations) as capacity,
        leased_order(state, snapshot.pending, policy, now, snapshot.service) as order,
        leased_running(state, policy) as running,
    ):
        return Cycle(snapshot, now, capacity, order, running, hand_over, state).run()


class Cycle:
    """The state of one cycle (everything here lives for one call of ``schedule``)."""

    def __init__(
        self,
        snapshot: Snapshot,
        now: float,
        capacity: FreeCapacity | None = None,
        order: KeptOrder | None = None,
        running: KeptRunning | None = None,
        hand_over: HandOver | None = None,
        state: SchedulerState | None = None,
    ) -> None:
        self.state = state = state if state is not None else SchedulerState()
        # the jobs that could not start, not tried again until something they wait on changed
        # (``parking``): a new cycle first, for what is stamped from now on
        self.parking = parking = state.parking
        self.cycle = parking.begin(snapshot.policy, snapshot.quotas)
        self.snapshot = snapshot
        self.fabric_of = {node.name: node.fabric_group for node in snapshot.nodes}
        self.hand_over = hand_over
        self.now = now
        self.policy = policy = snapshot.policy
        self.explain = policy.explain and snapshot.explain
        if capacity is None:
            capacity = build_capacity(snapshot.nodes, snapshot.allocations, state)
        self.capacity = capacity
        # fragmentation-aware placement, this cycle's (None: best fit)
        self.packer: Packer | None = None
        if policy.packing == "fgd":
            self.packer = Packer(
                allocations=snapshot.allocations, pending=snapshot.pending, memo=state
            )
        self.ledger = Ledger(
            snapshot.quotas,
            snapshot.allocations,
            snapshot.pending,
            capacity.pool_gpus,
            capacity.gpu_memories,
            order.waiting if order is not None else None,
            state,
        )
        self.held_at_start = dict(self.ledger.held)  # what each team holds (``_park``)
        self.refunded: set[str] = set()  # teams whose jobs were preempted in this cycle
        self.charged: set[str] = set()  # teams charged for jobs placed or preempting in it
        self.arrays = ArrayLimits(snapshot.allocations, snapshot.pending)
        # what the nodes hold of the jobs' wants, and what this cycle's placements fetch
        self.locality = Locality(snapshot.nodes)
        self.free_gpus = self.capacity.free_share()
        self.demands = DemandCache()
        # a team none of whose jobs left can start sleeps (``_rest``): not with one queue
        self.sleepy = policy.skip_blocked and policy.order != "fifo"
        self.queues = Queues(
            snapshot.pending,
            self.ledger,
            policy,
            now,
            snapshot.usage,
            snapshot.weights,
            snapshot.remaining,
            order,
            state,
            snapshot.service if policy.order == "gittins" else None,
        )
        preempts = policy.reclaim or policy.las_preemption
        self.preemptor = Preemptor.of(  # running jobs worked out when first needed
            snapshot.allocations if preempts else (),
            self.capacity,
            self.ledger,
            policy,
            now,
            snapshot.remaining,
            running,
        )
        self.reservations = (
            Reservations(snapshot.allocations, now)
            if policy.backfill and policy.skip_blocked
            else None
        )
        self.decisions = Decisions()
        self.blocked: dict[int, Blocked] = {}
        self.unplaced: list[QueuedJob] = []
        self.no_room = NoRoom()
        self.no_victims = NoVictims()
        self.sleeping: set[str] = set()  # teams none of whose jobs left can start (``_rest``)
        self.groups: dict[str, list[Group]] = {}  # a team's jobs left when it first failed
        self.reserved_teams: set[str] = set()
        self.deferred: list[QueuedJob] = []  # borrowers waiting for guaranteed teams' turns
        # the standing nominations, and the free GPUs they hold until their job's turn
        self.nominations = Nominations(self.capacity, self.preemptor, now)
        self.starts = 0  # jobs placed or preempted for since the last hand-over
        self.handed = (0, 0)  # the placements and preemptions handed over so far
        # per user's queue (team, user): jobs tried that could not start, the first of them,
        # and the queues tried ``Policy.max_tries`` times in vain
        self.tries: Counter[tuple[str, str]] = Counter()
        self.first_blocked: dict[tuple[str, str], int] = {}
        self.tired: set[tuple[str, str]] = set()
        self.nominations.hold(snapshot.nominations, snapshot.pending)
        self._wake_parked()
        self.parked: list[Parked] = []  # failed in this cycle, parked after it
        self.tried: list[int] = []  # tried in this cycle (placed, or not parked)
        self.grew = False  # capacity grew in this cycle: nothing parked used or parked after

    def _wake_parked(self) -> None:
        """Stamp what changed since the cycle before (``parking``)."""
        parking, capacity = self.parking, self.capacity
        grown = capacity.grown() if capacity.last_cycle == self.cycle - 1 else None
        if grown is None:  # no cycle just before on this capacity: nothing to compare with
            parking.wake_all()
        elif grown:
            parking.grown({model for rank in grown for model in capacity.nodes[rank].models})
        parking.fair_shares(self.ledger.fair)
        self.kept_stopping = frozenset(self.preemptor.taken)  # for the jobs nominated
        parking.kept_stopping(self.kept_stopping)
        parking.settle(self.kept_stopping)

    def run(self) -> Decisions:
        """The cycle's phases after its snapshot's (``__init__``: capacity, teams, queues,
        victims, the nominations' GPUs held, the parked jobs woken), as Kueue's ``schedule``
        names its own: admit in turns, the last turns, explain, requeue (park)."""
        self._in_turns()
        self._last_turns()
        if self.explain:
            self._explain()
        self._requeue()
        return self._not_handed_over()

    def _in_turns(self) -> None:
        """Each job in its turn (teams in fair-share turns, users by usage, jobs by level):
        placed, preempting, held back for guarantees, or waiting; until nothing more can
        start (unless the cycle explains)."""
        policy = self.policy
        for queued in self.queues:
            self.consider(queued)
            self._hand_over_enough()
            if policy.max_tries and queued.job.job_id in self.blocked:
                self._count_try(queued)
            if not self.explain and self._nothing_left_to_do():
                break

    def _last_turns(self) -> None:
        """The borrowers held back for teams below their guarantee, once more, last."""
        deferred, self.deferred = self.deferred, []
        for queued in deferred:
            self.consider(queued, last_try=True)
            self._hand_over_enough()
        self.decisions.nominations = self.nominations.standing

    def _explain(self) -> None:
        """Why each job left pending waits (``reasons``), the jobs not tried included."""
        for queued in self.queues.rest():
            self._left(queued)
        placed = [
            Allocation(p.job_id, p.node, p.gpus, p.cpus, p.memory_bytes)
            for p in self.decisions.placements
        ]
        self.decisions.pending = explain_unplaced(
            self.unplaced, self.blocked, self.capacity, self.snapshot, self.ledger, placed
        )
        self._say_what_is_freed()

    def _requeue(self) -> None:
        """Park the jobs that found neither room nor victims (``parking``), and mark what the
        capacity has free now as this cycle's end, for the next one to compare with."""
        self.parking.park(self.parked, self.tried)
        self.parking.forget_gone(self.snapshot.pending)
        self.capacity.last_cycle = self.cycle

    def _not_handed_over(self) -> Decisions:
        """The decisions, less those handed over as the cycle went."""
        decisions = self.decisions
        placed, preempted = self.handed
        decisions.placements = decisions.placements[placed:]
        decisions.preemptions = decisions.preemptions[preempted:]
        return decisions

    # -- bounded work (``Policy.max_starts``, ``Policy.max_tries``) ------------------------------

    def _hand_over_enough(self) -> None:
        """``max_starts`` jobs decided since the last hand-over: hand them over."""
        limit = self.policy.max_starts
        if self.hand_over is None or not limit or self.starts < limit:
            return
        placements, preemptions = self.decisions.placements, self.decisions.preemptions
        placed, preempted = self.handed
        self.handed = (len(placements), len(preemptions))
        self.starts = 0
        self.hand_over(Decisions(placements[placed:], preemptions=preemptions[preempted:]))

    def _count_try(self, queued: QueuedJob) -> None:
        """A job of a user could not start: after ``max_tries`` of them, the cycle tries no
        more of the user's jobs (they wait behind those, even if capacity grows), and they
        claim no free GPUs kept for guarantees (Slurm's ``bf_max_job_user``)."""
        key = queue_of(self, queued)
        # a task held back by its array's own limit says nothing of what fits: not a try
        if self.blocked[queued.job.job_id].code in UNTRIED or key in self.tired:
            return
        self.tries[key] += 1
        self.first_blocked.setdefault(key, queued.job.job_id)
        if self.tries[key] >= self.policy.max_tries:
            self.tired.add(key)
            ledger = self.ledger
            for job in self.queues.tire(*key):
                ledger.tried(job.team, ledger.gpus(job))

    def _say_what_is_freed(self) -> None:
        """A nominated job's reason names the GPUs being freed for it."""
        pending = self.decisions.pending
        for job_id, nomination in self.nominations.standing.items():
            reason = pending.get(job_id)
            if reason is not None and reason.code is Reason.PREEMPTING:
                message = f"{reason.message}; {being_freed(nomination)}"
                pending[job_id] = replace(reason, message=message)

    def _drop_nomination(self, job_id: int) -> None:
        """The job cannot use its nomination: its GPUs are free for all from now on."""
        if self.nominations.drop(job_id):
            self._capacity_grew()

    def _nothing_left_to_do(self) -> bool:
        """No free GPU left and no victim left: the rest cannot start in this cycle."""
        capacity = self.capacity
        if capacity.largest_free_block() or capacity.shared or self.nominations.holds:
            return False
        return not self.preemptor.any or len(self.preemptor.taken) >= len(self.preemptor.running)

    def consider(self, queued: QueuedJob, last_try: bool = False) -> None:
        """Try one job; ``last_try``: a job held back for teams below their guarantee, for
        the last time, after every turn. In order: what its team and array allow; a place
        (``_place``), unless parked; its nomination kept while its victims stop; victims
        (``_preempt``); else it waits (``_wait``)."""
        job = queued.job
        gpus = self.ledger.gpus(job)
        nominations = self.nominations
        if not last_try:
            self.ledger.tried(job.team, gpus)
            nominations.tried(job.job_id)
        refused = self._refused(job, gpus)
        if refused is not None:
            self._drop_nomination(job.job_id)
            self._block(queued, Blocked(refused))
            return
        demand = self.demands.of(job.request)
        nominated = job.job_id in nominations
        if nominated:
            # its GPUs go back to it first; it preempted for them, so no reservation guards them
            holding = nominations.unhold(job.job_id)
            where = Where(job.gpu_types)
        else:
            holding = []
            reservations = self.reservations
            where = reservations.where(job, job.gpu_types) if reservations else Where(job.gpu_types)
        # parked: known to find no room (nothing freed since it last failed)
        parked = None
        if self.parking.jobs and not self.grew and not nominated:
            parked = self.parking.room_for(job)
        if parked is not None:
            self.no_room.add(job, demand)  # what trying it would have learnt
        elif nominated or not self.no_room.covers(job, demand):
            if self._place(queued, demand, where, nominated, last_try):
                return
            if not nominated:
                self.no_room.add(job, demand)
        if nominated:
            waiting = nominations.stopping_for.get(job.job_id)
            if waiting is not None:
                # its victims are still stopping: keep their GPUs for it, preempt nobody more
                nominations.keep(job.job_id, holding)
                self._block(queued, Blocked(Reason.PREEMPTING, victims=waiting))
                return
            # all its GPUs are free, and still it does not fit: the nomination is of no use
            nominations.spent(job.job_id)
            if holding:
                self._capacity_grew()
        if self._preempt(queued, demand, where, gpus, parked):
            self.tried.append(job.job_id)
            return
        self._wait(queued, demand, gpus, nominated, parked, guarded=where.node_ok is not None)

    def _refused(self, job: PendingJob, gpus: float) -> Reason | None:
        """Why the job may not start whatever is free, if it may not: its array's limit of
        tasks at once, its team's limit, no guarantee for work that may not be preempted."""
        ledger = self.ledger
        if not self.arrays.fits(job):
            return Reason.ARRAY_LIMIT
        if not ledger.fits_limit(job.team, gpus):
            return Reason.OVER_QUOTA
        if not job.preemptible and not ledger.unpreemptible_fits(job.team, gpus):
            return Reason.NOT_GUARANTEED
        return None

    def _place(
        self, queued: QueuedJob, demand: Demand, where: Where, nominated: bool, last_try: bool
    ) -> bool:
        """Place all the job's tasks, or none (``placement``); False: they do not fit. Placed
        where it would borrow the free GPUs teams below their guarantee may still claim, it
        is taken off again and waits for their turns (the last turn: it is blocked)."""
        job = queued.job
        # locality chooses among the spots that fit; a nominee takes the GPUs it preempted for
        fetch = None
        if job.wants:
            fetch = self.locality.fetch(job.wants, self.policy.locality and not nominated)
        if job.one_fabric:
            placements = place_in_one_fabric(
                job.job_id,
                job.tasks,
                demand,
                self.capacity,
                where,
                self.fabric_of,
                self.packer,
                fetch,
            )
        else:
            placements = place_tasks(
                job.job_id,
                job.tasks,
                demand,
                self.capacity,
                where,
                job.distinct_nodes,
                self.packer,
                fetch,
            )
        if placements is None:
            return False
        held = sum(part.share for placement in placements for part in placement.gpus)
        # a nominee takes back what its preemptions freed: nobody else could claim it
        kept = [] if nominated else self._kept_for_guarantees(job, held)
        if kept:
            unplace(placements, demand, self.capacity)
            self._drop_nomination(job.job_id)
            self._capacity_grew()
            if last_try:
                self._block(queued, Blocked(Reason.FAIR_SHARE, teams=kept))
            else:
                self.deferred.append(queued)
                self._hold_back_the_queue(queued)  # strict queues: it stays the head
            return True
        self.decisions.placements.extend(placements)
        if job.wants:
            self.locality.note(placements, job.wants)
        self.starts += 1
        self.arrays.start(job)
        self.nominations.spent(job.job_id)  # it starts: the nomination is spent
        self.free_gpus -= held
        self.ledger.charge(job.team, held, job.preemptible)
        self.charged.add(job.team)
        self.queues.charge_user(job)
        if self.reservations is not None:
            self.reservations.note(placements, job)
        self.tried.append(job.job_id)
        return True

    def _wait(
        self,
        queued: QueuedJob,
        demand: Demand,
        gpus: float,
        nominated: bool,
        parked: Parked | None,
        guarded: bool,
    ) -> None:
        """The job found neither room nor victims: blocked by a reservation in its way
        (``guarded``: it was kept off reserved spots), or waiting, the first of its team to
        reserve the spot that frees first; parked, its queue held back, its team perhaps
        asleep."""
        job = queued.job
        room_elsewhere = False  # may it fit off the reserved spots? (parked: no)
        if guarded and parked is None:
            reservation, room_elsewhere = self._reservation_in_the_way(job, demand)
            if reservation is not None:
                self._block(queued, Blocked(Reason.RESERVED, reservation=reservation))
                self._rest(queued)
                self.tried.append(job.job_id)
                return
        blocked = Blocked(None)
        reservations = self.reservations
        if reservations is not None and job.team not in self.reserved_teams:
            self.reserved_teams.add(job.team)
            blocked.reservation = reservations.reserve(
                job, demand, self.capacity, Where(job.gpu_types)
            )
        self._block(queued, blocked)
        self._park(queued, gpus, nominated, room_elsewhere)
        self._hold_back_the_queue(queued)
        self._rest(queued)

    def _park(self, queued: QueuedJob, gpus: float, nominated: bool, room_elsewhere: bool) -> None:
        """The job found neither room nor victims: park it (``parking``), unless it is not
        sure that no room at all is left for it (a nominee; a job kept off reserved spots
        that may fit elsewhere: ``room_elsewhere``), or capacity grew in this cycle."""
        job = queued.job
        if nominated or self.grew or room_elsewhere:
            self.tried.append(job.job_id)
            return
        preemptor, ledger = self.preemptor, self.ledger
        rank = preemptor.rank(job, queued.level) if preemptor.any else None
        # whether it could reclaim in any later cycle: its team holds at least what it held
        # at the start of this one (in the cycle, it may be charged for jobs that preempt,
        # which a later cycle need not charge before this job's turn), or a stamp wakes it
        held = self.held_at_start.get(job.team, 0.0)
        reclaim = self.policy.reclaim and (
            ledger.within_fair_share(job.team, gpus, held)
            or ledger.within_guarantee(job.team, gpus, held)
        )
        self.parked.append(Parked(job, self.cycle, rank, reclaim))

    def _capacity_grew(self) -> None:
        """What did not fit before may fit now: forget it, and wake the sleeping teams.
        Nothing parked holds any more: what failed so far may fit now."""
        self.grew = True
        self.tried.extend(entry.job.job_id for entry in self.parked)
        self.parked.clear()
        self.no_room.clear()
        self.preemptor.capacity_grew()
        self.sleeping.clear()
        self.queues.wake()
        self.ledger.awake()

    def _rest(self, queued: QueuedJob) -> None:
        """A job found neither room nor victims: when no job of its team left could find
        either (a job asking no less than one that found no room, or no victims at no
        better a rank, finds none: see ``NoRoom``, ``NoVictims``), the team sleeps for the
        rest of the cycle, unless capacity grows. Each such job would only be blocked, with
        nothing else to do: none of them holds a nomination, and the team has reserved. Its jobs
        left then claim no free GPUs kept for guarantees (``Ledger.asleep``): the borrowers
        tried after it are not held back for them (those held back before still wait for
        the last turn: trying them at once placed borrowers sooner and cost the --vc week
        4.6 points of utilisation). The cycle does no work for the sleeping team's jobs but
        to explain them (``_left``), which long queues need."""
        job = queued.job
        team = job.team
        if not self.sleepy or team in self.sleeping:
            return
        if self.nominations.nominees[team]:
            return  # a nominated job takes its nomination back, or gives it up
        if self.reservations is not None and team not in self.reserved_teams:
            return
        rank = self.preemptor.rank(job, queued.level)  # the team's jobs left rank no better
        victims = self.preemptor.any
        groups = self.groups.get(team)
        if groups is None:  # what covers the jobs left then covers those left later
            groups = self.groups[team] = self.queues.groups_left(team, self.demands)
        for group in groups:
            if not self.no_room.covers_group(group):
                return
            if victims and not self.no_victims.covers_group(team, group, rank):
                return
        self.sleeping.add(team)
        self.queues.sleep(team)
        self.ledger.asleep(team)

    def _left(self, queued: QueuedJob) -> None:
        """A job not tried in the cycle, to explain: nothing more could start, or its team
        slept. What trying it would have said first is said here: its team's limit, no
        guarantee for non-preemptible work, or a reservation in its way."""
        job = queued.job
        if not self.arrays.fits(job):
            self._block(queued, Blocked(Reason.ARRAY_LIMIT))
            return
        if self.tired and queue_of(self, queued) in self.tired:
            self._left_untried(queued)
            return
        if job.team not in self.sleeping:
            self.unplaced.append(queued)
            return
        ledger = self.ledger
        gpus = ledger.gpus(job)
        if not ledger.fits_limit(job.team, gpus):
            self._block(queued, Blocked(Reason.OVER_QUOTA))
        elif not job.preemptible and not ledger.unpreemptible_fits(job.team, gpus):
            self._block(queued, Blocked(Reason.NOT_GUARANTEED))
        elif self.reservations is not None and self.reservations.by_node:
            reservation, _ = self._reservation_in_the_way(job, self.demands.of(job.request))
            code = Reason.RESERVED if reservation is not None else None
            self._block(queued, Blocked(code, reservation=reservation))
        else:
            self._block(queued, Blocked(None))

    def _left_untried(self, queued: QueuedJob) -> None:
        """A job of a user the cycle stopped trying (``max_tries``): over its team's limit
        if it is, else waiting behind the user's jobs that could not start."""
        job = queued.job
        if not self.ledger.fits_limit(job.team, self.ledger.gpus(job)):
            self._block(queued, Blocked(Reason.OVER_QUOTA))
            return
        key = queue_of(self, queued)
        behind, tries = self.first_blocked[key], self.tries[key]
        self._block(queued, Blocked(Reason.QUEUED, behind=behind, tries=tries))

    def _hold_back_the_queue(self, queued: QueuedJob) -> None:
        """Strict queues: the jobs behind a blocked head wait behind it."""
        if self.policy.skip_blocked:
            return
        team = queued_team(self, queued)
        if not self.explain:  # nobody reads why they wait: they are not worked through
            self.queues.drop(team)
            return
        for behind in self.queues.drop_team(team):
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

    def _reservation_in_the_way(
        self,
        job,  # noqa: ANN001
        demand: Demand,
    ) -> tuple[Reservation | None, bool]:
        """The reservation of the node where the job would fit but for reservations, and
        whether it may fit somewhere but for them (a gang: not looked at, so it may)."""
        if job.tasks != 1:
            return None, True
        claim = find_spot(demand, self.capacity, Where(job.gpu_types), self.packer)
        if claim is None:
            return None, False
        reservations = self.reservations
        found = reservations.by_node.get(claim.node.name)
        if found is not None and found.job_id != job.job_id:
            return found, True
        others = (r for r in reservations.by_node.values() if r.job_id != job.job_id)
        return next(others, None), True

    def _preempt(
        self, queued: QueuedJob, demand: Demand, where: Where, gpus: float, parked: Parked | None
    ) -> bool:
        job = queued.job
        if not self.preemptor.any:
            return False
        rank = self.preemptor.rank(job, queued.level)
        if self.no_victims.covers(job, rank, demand):
            return False
        if parked is not None and self._no_victims_yet(parked, rank):
            self.no_victims.add(job, rank, demand)  # what searching would have learnt
            return False
        choice = self.preemptor.find(job, queued.level, demand, Where(job.gpu_types))
        if choice is None:
            self.no_victims.add(job, rank, demand)
            return False
        self._apply(job, choice, gpus)
        self.nominations.nominate(job, choice, demand)
        self.starts += 1
        self.arrays.start(job)  # its victims' GPUs are its: the array's slot is too
        self._block(queued, Blocked(Reason.PREEMPTING, victims=choice.victims))
        return True

    def _no_victims_yet(self, parked: Parked, rank: tuple) -> bool:
        """Whether no victim became eligible for a parked job since it looked. What teams
        hold changes in the cycle too: a job that may reclaim may take more from another team
        charged for a job placed or preempting before its turn, and a team whose jobs were
        preempted in this cycle may reclaim again."""
        if self.policy.order == "srtf":  # the running jobs' remaining work changes each cycle
            return False
        team = parked.job.team
        if team in self.refunded or (parked.reclaim and self._more_takeable(team)):
            return False
        self.preemptor.running  # noqa: B018 -- brings the running jobs (and their stamps) up to date
        self.parking.settle(self.kept_stopping)
        return self.parking.no_victims_for(parked, rank)

    def _more_takeable(self, team: str) -> bool:
        """Whether another team was charged in this cycle and holds more than its fair share
        (less, and none of its jobs may be reclaimed: ``Eligibility.may_take``)."""
        ledger = self.ledger
        return any(
            other != team and ledger.held[other] > ledger.fair.get(other, 0.0) + EPSILON
            for other in self.charged
        )

    def _apply(self, job, choice: Choice, gpus: float) -> None:  # noqa: ANN001
        self.preemptor.take(choice)
        self.ledger.charge(job.team, gpus, job.preemptible)
        self.charged.add(job.team)
        for victim in choice.victims:
            if victim.stopping:
                continue
            self.ledger.refund(victim.team, victim.gpus, victim.preemptible)
            self.refunded.add(victim.team)
            self.queues.rekey(victim.team)
            self.decisions.preemptions.append(
                Preemption(victim.job_id, job.job_id, *preemption_reason(job, victim))
            )

    def _block(self, queued: QueuedJob, blocked: Blocked) -> None:
        self.blocked[queued.job.job_id] = blocked
        self.unplaced.append(queued)


# reasons that do not count as a try of the user's queue (``Cycle._count_try``)
UNTRIED = frozenset({Reason.PREEMPTING, Reason.ARRAY_LIMIT})


def queued_team(cycle: Cycle, queued: QueuedJob) -> str:
    return "" if cycle.policy.order == "fifo" else queued.job.team


def queue_of(cycle: Cycle, queued: QueuedJob) -> tuple[str, str]:
    """The (team, user) of the queue a job waits in (fifo: the one queue)."""
    if cycle.policy.order == "fifo":
        return FIFO_TEAM, FIFO_TEAM
    return queued.job.team, queued.job.user


def preemption_reason(job, victim) -> tuple[Reason, str]:  # noqa: ANN001
    if victim.team != job.team:
        return (
            Reason.PREEMPTED,
            # another team's job is not named to the victim's team: only its team is
            f"preempted for a job of team {job.team}: team {victim.team} is above "
            "its fair share and team "
            f"{job.team} is within its own",
        )
    if victim.priority < job.priority:
        why = f"it has a higher priority ({job.priority} > {victim.priority})"
    else:
        why = "it has received less GPU time (least-attained-service levels)"
    return Reason.PREEMPTED, f"preempted for job {job.job_id} of the same team: {why}"
