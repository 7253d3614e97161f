"""Jobs that could not start, set aside until something they wait on changes.

kube-scheduler keeps a pod that did not fit in an *unschedulable queue* and moves it back
only on an event that may make it fit (its *queueing hints*). Here a job that found neither
room nor victims is **parked**: in the cycles after, while nothing it waits on has changed,
it is not tried again — it is told what it was told, and counts as tried (the user's
``max_tries``, the team's memos, its reservation), so that the cycle decides as if it had
been tried; only the searches (placement and victims) are saved.

What wakes a parked job (each event is stamped with the cycle that saw it; a job parked in
an earlier cycle than an event's stamp is tried again):

- **room**: a node of one of its GPU models (any, for a job asking no GPU) has more free
  than at the end of the cycle before (an allocation gone or shrunk, a nomination given up:
  ``FreeCapacity.grown``), or capacity grows within the cycle (a nomination given up: then
  nothing parked is used for the rest of it, and what failed before is not parked);
- **victims** (a job that looked for them): a running job of its own team gone or changed
  (its team may hold less); a running job changed (a stop under way) that is not kept for
  the job nominated to its GPUs; a running job come in any team, when its team could reclaim
  (within its fair share or guarantee with it, as it held at the start of its cycle); a
  running job of its team that it outranks and that passed ``min_runtime`` or reached a
  higher level (least-attained service); the fair shares; its own rank (priority, level);
  and, within a cycle, its team's jobs preempted, or (when it could reclaim) another team
  charged for a job placed or preempting before its turn;
- **everything**: the nodes, the policy, the quotas, a capacity or a set of running jobs
  built anew (nothing kept to compare with), and the job itself changed.

Capacity only shrinks between two such cycles (placements applied, nothing freed), and no
victim becomes eligible, so a parked job would fail again: the decisions are those of trying
it (a property test replays random histories both ways).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpupool.domain.policy import Policy
from gpupool.scheduler.types import PendingJob, TeamQuota, model_matches

RIPE_KEPT = 256  # cycles of ``Parking.ripe_ranks`` kept per team


@dataclass(slots=True)
class Parked:
    """A job set aside: as it was, the cycle it last failed in, and how it looked for
    victims (``rank`` None: it did not)."""

    job: PendingJob
    since: int
    rank: tuple | None
    reclaim: bool


@dataclass
class Parking:
    """The parked jobs and the stamps of the events that wake them, kept by a
    ``SchedulerState`` from one cycle to the next."""

    enabled: bool = True  # False: every job tried each cycle (a benchmark's baseline)
    cycle: int = 0
    jobs: dict[int, Parked] = field(default_factory=dict)
    woke_all: int = 0  # everything (see the module)
    room: dict[str, int] = field(default_factory=dict)  # GPU model -> more free on such a node
    room_any: int = 0  # the latest of ``room``
    victims: int = 0  # a running job gone or changed, the fair shares
    came: int = 0  # a running job come, any team
    teams: dict[str, int] = field(default_factory=dict)  # a team's running job gone or changed
    # per team, (cycle, the highest victim rank) of its running jobs that became victims for
    # its own jobs (past ``min_runtime``, a higher level) in that cycle, the last ``RIPE_KEPT``
    ripe_ranks: dict[str, list[tuple[int, tuple]]] = field(default_factory=dict)
    ripe_forgotten: dict[str, int] = field(default_factory=dict)  # the last cycle dropped
    # what a cycle compares with the one before
    policy: Policy | None = None
    quotas: tuple[TeamQuota, ...] | None = None
    fair: dict[str, float] | None = None
    kept_for: frozenset[int] = frozenset()  # stopping jobs kept for the jobs nominated
    unsettled: set[int] = field(default_factory=set)  # running jobs changed (``settle``)

    def begin(self, policy: Policy, quotas: tuple[TeamQuota, ...]) -> int:
        """A new cycle: its number, everything woken if the policy or quotas changed."""
        self.cycle += 1
        same = (
            self.policy is not None
            and (self.policy is policy or self.policy == policy)
            and self.quotas == quotas
        )
        if not same:
            self.wake_all()
        self.policy, self.quotas = policy, quotas
        return self.cycle

    def wake_all(self) -> None:
        self.woke_all = self.cycle

    def grown(self, models: Iterable[str]) -> None:
        """Nodes of these GPU models have more free than at the end of the cycle before."""
        for model in models:
            self.room[model] = self.cycle
            self.room_any = self.cycle

    def fair_shares(self, fair: dict[str, float]) -> None:
        if self.fair is not None and fair != self.fair:
            self.victims = self.cycle
        self.fair = dict(fair)

    def kept_stopping(self, kept: Iterable[int]) -> None:
        """The stopping jobs kept for nominated jobs (nobody else's victims): one let go is a
        victim for any job."""
        kept = frozenset(kept)
        if not self.kept_for <= kept:
            self.victims = self.cycle
        self.kept_for = kept

    # -- what ``KeptRunning`` saw ------------------------------------------------------------

    def running_changed(self) -> None:
        """A running job gone or changed (or all of them worked out anew)."""
        self.victims = self.cycle

    def changed(self, job_id: int, team: str) -> None:
        """A running job changed (a stop under way): its team may hold less, and the job is
        a victim for any job unless kept for the job nominated to its GPUs (``settle``)."""
        self.teams[team] = self.cycle
        self.unsettled.add(job_id)

    def held_less(self, team: str) -> None:
        """A running job of ``team`` gone or changed: the team may hold less."""
        self.teams[team] = self.cycle

    def ripe(self, team: str, rank: tuple) -> None:
        """A running job of ``team``, of victim rank ``rank`` (``Eligibility``: a job of
        the team ranked better may take it), became a victim for its team's jobs."""
        stamps = self.ripe_ranks.setdefault(team, [])
        if stamps and stamps[-1][0] == self.cycle:
            if rank > stamps[-1][1]:
                stamps[-1] = (self.cycle, rank)
            return
        stamps.append((self.cycle, rank))
        if len(stamps) > RIPE_KEPT:
            self.ripe_forgotten[team] = stamps[0][0]
            del stamps[0]

    def settle(self, kept: Iterable[int]) -> None:
        """The running jobs changed since the last call, less those ``kept`` for nominated
        jobs: any of them wakes every job that looked for victims."""
        if self.unsettled and not self.unsettled <= set(kept):
            self.victims = self.cycle
        self.unsettled = set()

    def running_came(self, team: str) -> None:
        """A running job come: what its team holds grows (more may be reclaimed from it);
        a victim for its own team once past ``min_runtime`` (``ripe``)."""
        self.came = self.cycle

    # -- a job ------------------------------------------------------------------------------

    def room_for(self, job: PendingJob) -> Parked | None:
        """The job's parking when no room has been made for it since (None: try it)."""
        parked = self.jobs.get(job.job_id)
        if parked is None or not self.enabled or not (parked.job is job or parked.job == job):
            return None
        since = parked.since
        if self.woke_all > since:
            return None
        if self.room_any > since:
            request = job.request
            # a job asking no GPU goes on a node of any model
            types = job.gpu_types if request.gpus or request.gpu_memory_bytes else ()
            if any(stamp > since and model_matches(types, m) for m, stamp in self.room.items()):
                return None
        return parked

    def no_victims_for(self, parked: Parked, rank: tuple) -> bool:
        """Whether no victim has become eligible for the parked job since it looked."""
        since = parked.since
        if parked.rank is None or parked.rank != rank or self.victims > since:
            return False
        if parked.reclaim and self.came > since:
            return False
        team = parked.job.team
        if self.teams.get(team, 0) > since or self.ripe_forgotten.get(team, 0) > since:
            return False
        for cycle, victim in reversed(self.ripe_ranks.get(team, ())):
            if cycle <= since:
                break
            if rank < victim:
                return False  # it outranks a job of its team that became a victim
        return True

    def park(self, parked: Iterable[Parked], tried: Iterable[int]) -> None:
        """After a cycle: these jobs failed (parked from this cycle); the others ``tried``
        are not parked any more."""
        jobs = self.jobs
        for job_id in tried:
            jobs.pop(job_id, None)
        for entry in parked:
            jobs[entry.job.job_id] = entry

    def forget_gone(self, pending: Iterable[PendingJob]) -> None:
        """Drop the jobs no longer pending, once there are many more parked than pending."""
        ids = {job.job_id for job in pending}
        if len(self.jobs) > 2 * len(ids) + 1024:
            self.jobs = {job_id: entry for job_id, entry in self.jobs.items() if job_id in ids}
