"""Phase 2: the order in which pending jobs are tried, kept current as the cycle goes.

Teams take turns through a heap: teams under their guarantee first (the least served
first), then the others by GPUs held beyond their guarantee per unit of weight, so the
pool's spare capacity is shared in proportion to weights, as the fair shares (``ledger``)
share it. A team's key changes as its jobs are placed (or its work
preempted), so the next turn goes to whoever is then furthest behind.

Inside a team, each user has a queue; users take turns by the head job's priority (higher
first) and least-attained-service level (lower first), then by the user's decayed past
usage per unit of weight (Slurm's fair-share factor orders the same way), then by submit
time. Inside a user's queue: priority, level, then the time the job (re)entered the queue.

Levels are Tiresias' discretised least-attained-service: a job's level is how many of the
``las_thresholds`` (GPU-seconds) its attained service has passed, so short experiments run
ahead of week-long runs without anyone knowing durations. A job that has waited
``starvation_factor`` times its attained service goes back to level 0. With ``order
"gittins"`` the jobs of a level go by their Gittins index over the service distribution of
the snapshot (``gittins``), highest first, then by when they were queued.

A job's position is its 1-based place in its team's order.

Each user's queue is kept from one cycle to the next (``leased_order``): a job's place in
it changes only when it starves, so a cycle takes the queues of the one before, less the
jobs gone and plus those come, instead of sorting every pending job anew.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter

from gpupool.domain.policy import Policy
from gpupool.scheduler.fit import DemandCache
from gpupool.scheduler.gittins import ServiceDistribution
from gpupool.scheduler.kept import by_key, changes
from gpupool.scheduler.ledger import Ledger, fixed_gpus, job_gpus, total_gpus
from gpupool.scheduler.memo import Group, groups_of, groups_of_shapes, merged, shape_of
from gpupool.scheduler.state import SchedulerState, remembered
from gpupool.scheduler.types import PendingJob

FIFO_TEAM = ""  # the single queue of the fifo baseline
LEVELLED = ("las", "gittins")  # the orders of least-attained-service levels


@dataclass(slots=True)
class QueuedJob:
    job: PendingJob
    position: int  # 1-based, in its team's queue
    level: int = 0


def level_of(attained: float, policy: Policy) -> int:
    return bisect_right(policy.las_thresholds, attained) if policy.order in LEVELLED else 0


# a pending job (frozen) waits through many cycles: its least-attained-service key is
# worked out once per policy (and service distribution), kept on the state by job id (an
# entry counts for its job only)
def las_key(
    job: PendingJob,
    policy: Policy,
    state: SchedulerState,
    service: ServiceDistribution | None = None,
) -> tuple[tuple, float, float]:
    """The job's key before starvation (-priority, level, place, id), when it (re)entered
    the queue, and how long it then waits to starve (inf: never). ``service``: the finished
    jobs' service, which places a job in its level with ``order`` "gittins"."""
    found = state.job_keys.get(job.job_id)
    if (
        found is not None
        and found[0] is job
        and (found[1] is policy or found[1] == policy)
        and found[3] is service
    ):
        return found[2]
    entry = _las_key(job, policy, service)
    remembered(state.job_keys, job.job_id, (job, policy, entry, service))
    return entry


def _las_key(
    job: PendingJob, policy: Policy, service: ServiceDistribution | None
) -> tuple[tuple, float, float]:
    queued = job.queued_at if job.queued_at is not None else job.submitted_at
    level = level_of(job.attained, policy)
    threshold = float("inf")
    if level and policy.starvation_factor > 0:
        threshold = max(policy.starvation_min_wait, policy.starvation_factor * job.attained)
    place = dlas_place(job, level, queued, policy)
    if policy.order == "gittins":
        index = service.index(job.attained) if service is not None else 0.0
        place = (-index, place)  # type: ignore[assignment]  # every key of the policy alike
    entry = ((-job.priority, level, place, job.job_id), queued, threshold)
    return entry


def dlas_place(job: PendingJob, level: int, queued: float, policy: Policy) -> float:
    """Where a pending job stands among those of its level: when it (re)entered the queue;
    with ``dlas_queues``, a job preempted after it ran at its level stands before every job
    never run there (whose times are not negative), the last preempted first."""
    if not policy.dlas_queues or job.queued_at is None:
        return queued
    gpus = job.request.gpu_count * job.tasks
    return queued if just_reached(job.attained, gpus, level, policy) else -job.queued_at


def just_reached(attained: float, gpus: float, level: int, policy: Policy) -> bool:
    """Whether a job has only just reached its level: by less than a second of its GPUs'
    service (the replay's resolution of a threshold crossing; ``Policy.dlas_queues``)."""
    floor = policy.las_thresholds[level - 1] if level else 0.0
    return attained - floor < gpus


def queue_key(
    job: PendingJob,
    now: float,
    policy: Policy,
    state: SchedulerState,
    service: ServiceDistribution | None = None,
) -> tuple[tuple, float]:
    """A pending job's key in its user's queue (not for ``srtf``: see ``Queues``), with when
    it will starve (inf: never, or starved already). Its level is that of its attained
    service, or 0 once it has waited ``starvation_factor`` times that service (and
    ``starvation_min_wait``)."""
    if policy.order == "fifo":
        return (0, 0, job.submitted_at, job.job_id), float("inf")
    key, queued, threshold = las_key(job, policy, state, service)
    if not key[1]:
        return key, float("inf")
    if now - queued >= threshold:
        return (key[0], 0, *key[2:]), float("inf")
    return key, queued + threshold


def _first(entry: tuple[tuple, PendingJob]) -> tuple:
    return entry[0]


class UserQueue:
    """One user's jobs in order (``jobs`` is read, never changed: it may be a kept list)."""

    __slots__ = ("jobs", "next", "user", "weight")

    def __init__(
        self, user: str, jobs: list[tuple[tuple, PendingJob]], weight: float, ordered: bool = False
    ):
        if not ordered:
            jobs.sort(key=_first)
        self.user = user
        self.jobs = jobs
        self.next = 0
        self.weight = weight

    def head(self) -> tuple[tuple, PendingJob] | None:
        return self.jobs[self.next] if self.next < len(self.jobs) else None


class TeamQueue:
    """One team's users, in fair-share turns."""

    __slots__ = ("_out", "heap", "served", "team", "tired", "usage", "users")

    def __init__(self, team: str, users: list[UserQueue], usage: Mapping[str, float]):
        self.team = team
        self.users = users
        self.usage = {queue.user: usage.get(queue.user, 0.0) for queue in users}
        self.served = 0
        self.heap: list[tuple] = []
        self._out: UserQueue | None = None  # the user whose job was handed out last
        self.tired: list[UserQueue] = []  # users whose turns ended for the cycle (``tire``)
        for queue in users:
            self._push(queue)

    def tire(self, user: str) -> list[PendingJob]:
        """End the turns of the user of the last job handed out, for this cycle; the user's
        jobs left (not handed out)."""
        queue = self._out
        if queue is None or queue.user != user:
            return []
        self._out = None
        self.tired.append(queue)
        return [job for _, job in queue.jobs[queue.next :]]

    def _push(self, queue: UserQueue) -> None:
        head = queue.head()
        if head is None:
            return
        key, _ = head
        share = self.usage[queue.user] / queue.weight
        # key = (-priority, level, seq...): priority and level outrank the user's usage
        heapq.heappush(self.heap, (key[0], key[1], share, key[2:], queue.user, queue))

    def pop(self) -> PendingJob | None:
        """The next job; its user's turn comes back with ``restore`` (after its charge)."""
        self.restore()
        if not self.heap:
            return None
        queue: UserQueue = heapq.heappop(self.heap)[-1]
        _, job = queue.jobs[queue.next]
        queue.next += 1
        self.served += 1
        self._out = queue
        return job

    def charge(self, user: str, usage: float) -> None:
        if user in self.usage:
            self.usage[user] += usage

    def restore(self) -> None:
        """Put the user of the last job handed out back in turn (once)."""
        queue = self._out
        if queue is not None:
            self._out = None
            self._push(queue)

    def __bool__(self) -> bool:
        return bool(self.heap) or (self._out is not None and self._out.head() is not None)


class Queues:
    """The pending jobs in turn: ``next()`` gives a job, then ``done(job)`` hands the turn on.

    ``drop_team`` ends a team's turns for this cycle (strict queues whose head is blocked).
    ``sleep`` takes a team out of the turns until ``wake``: the cycle knows none of its jobs
    left can start; ``left`` lists a team's jobs not handed out yet.
    """

    def __init__(
        self,
        pending: Iterable[PendingJob],
        ledger: Ledger,
        policy: Policy,
        now: float,
        usage: Mapping[str, float],
        weights: Mapping[str, float],
        remaining: Mapping[int, float],
        kept: KeptOrder | None = None,
        state: SchedulerState | None = None,
        service: ServiceDistribution | None = None,
    ) -> None:
        self.ledger = ledger
        self.policy = policy
        self.kept = kept
        self.service = service
        self.state = state if state is not None else SchedulerState()
        by_team: dict[str, dict[str, list[tuple[tuple, PendingJob]]]] = {}
        fifo = policy.order == "fifo"
        if kept is not None:  # the users' queues kept from the cycle before, brought up to date
            for (team, user), jobs in kept.lists.items():
                by_team.setdefault(team, {})[user] = jobs
            self.levels = kept.levels
        else:
            self.levels = {}
            for job in pending:
                key = self._job_key(job, now, remaining)
                team = FIFO_TEAM if fifo else job.team
                user = FIFO_TEAM if fifo else job.user
                by_team.setdefault(team, {}).setdefault(user, []).append((key, job))
        fair = policy.fair_share and not fifo
        self.teams: dict[str, TeamQueue] = {}
        for team, users in by_team.items():
            queues = [
                UserQueue(user, jobs, weights.get(user, 1.0) if fair else 1.0, kept is not None)
                for user, jobs in users.items()
            ]
            self.teams[team] = TeamQueue(team, queues, usage if fair else {})
        self.heap: list[tuple] = []
        self.version: dict[str, int] = dict.fromkeys(self.teams, 0)
        for team in self.teams:
            self._push(team)
        self.dropped: set[str] = set()
        self.asleep: set[str] = set()

    def _job_key(self, job: PendingJob, now: float, remaining: Mapping[int, float]) -> tuple:
        if self.policy.order == "srtf":
            queued = job.queued_at if job.queued_at is not None else job.submitted_at
            return (-job.priority, remaining.get(job.job_id, 0.0), queued, job.job_id)
        key, _ = queue_key(job, now, self.policy, self.state, self.service)
        if key[1]:
            self.levels[job.job_id] = key[1]
        return key

    def _push(self, team: str) -> None:
        key = (0, 0.0) if team == FIFO_TEAM else self.ledger.order_key(team)
        heapq.heappush(self.heap, (key, team, self.version[team]))

    def rekey(self, team: str) -> None:
        """The team's held GPUs changed (placed, or preempted): its turn moves."""
        if team in self.teams and team not in self.dropped and self.teams[team]:
            self.version[team] += 1
            self._push(team)

    def __iter__(self) -> Iterator[QueuedJob]:
        while self.heap:
            _, team, version = heapq.heappop(self.heap)
            if version != self.version[team] or team in self.dropped:
                continue
            if team in self.asleep:
                continue  # ``wake`` puts it back in turn
            queue = self.teams[team]
            job = queue.pop()
            if job is None:
                continue
            yield QueuedJob(job, queue.served, self.levels.get(job.job_id, 0))
            if team in self.dropped:
                continue
            queue.restore()
            if queue:
                self.version[team] += 1
                self._push(team)

    def sleep(self, team: str) -> None:
        self.asleep.add(team)

    def left(self, team: str) -> Iterator[PendingJob]:
        queue = self.teams.get(team)
        if queue is not None:
            for user in queue.users:
                for _, job in user.jobs[user.next :]:
                    yield job

    def groups_left(self, team: str, demands: DemandCache) -> list[Group]:
        """The groups (``memo.Group``) of the team's jobs not handed out yet."""
        queue = self.teams.get(team)
        if queue is None:
            return []
        kept = self.kept
        if kept is None:
            return groups_of(self.left(team), demands, self.state)
        return merged(kept.groups_from((team, user.user), user.next) for user in queue.users)

    def wake(self) -> None:
        """Every sleeping team takes its turns again."""
        asleep, self.asleep = self.asleep, set()
        for team in sorted(asleep):
            self.rekey(team)

    def charge_user(self, job: PendingJob) -> None:
        """A placed job's user counts as having used ``placement_charge`` more per GPU."""
        queue = self.teams.get(job.team)
        if queue is not None:
            gpus = self.ledger.gpus(job)
            queue.charge(job.user, gpus * self.policy.placement_charge)

    def tire(self, team: str, user: str) -> list[PendingJob]:
        """End the turns of a user (of the job just handed out) for this cycle; the user's
        jobs left."""
        queue = self.teams.get(team)
        return queue.tire(user) if queue is not None else []

    def drop(self, team: str) -> None:
        """End a team's turns for this cycle (``drop_team`` without its jobs left)."""
        self.dropped.add(team)

    def drop_team(self, team: str) -> list[QueuedJob]:
        """End a team's turns for this cycle; its jobs not yet tried, in order (those of
        users whose turns ended last)."""
        self.dropped.add(team)
        queue = self.teams[team]
        rest: list[QueuedJob] = []
        levels = self.levels
        while (job := queue.pop()) is not None:  # pop puts the user of the last job back
            rest.append(QueuedJob(job, queue.served, levels.get(job.job_id, 0)))
        queue.restore()
        for tired in queue.tired:
            for _, job in tired.jobs[tired.next :]:
                queue.served += 1
                rest.append(QueuedJob(job, queue.served, levels.get(job.job_id, 0)))
        return rest

    def rest(self) -> list[QueuedJob]:
        """Every job not yet tried (when nothing more can start), in turn order."""
        rest: list[QueuedJob] = []
        for team in sorted(self.teams):  # in one order whatever the snapshot's
            if team not in self.dropped:
                rest.extend(self.drop_team(team))
        return rest


class KeptOrder:
    """The users' queues of the pending jobs, kept in order from one cycle to the next.

    A pending job's place in its user's queue does not change while it waits, but when it
    starves (``queue_key``): so the queues of a cycle are those of the cycle before,
    less the jobs gone (started, cancelled, or requeued as another job object), plus those
    come, each put in place by bisection, and the starving moved. ``srtf`` (whose keys are
    the remaining work of each cycle) is not kept. ``lists`` and ``levels`` are read by the
    cycle, never changed."""

    def __init__(
        self, policy: Policy, state: SchedulerState, service: ServiceDistribution | None = None
    ) -> None:
        self.policy = policy
        self.state = state  # its owner's: the memos of job keys and shapes
        self.service = service  # the keys' distribution ("gittins"): kept while the same
        self.fifo = policy.order == "fifo"
        self._clear()

    def _clear(self) -> None:
        self.now = float("-inf")
        self.jobs: dict[int, tuple[PendingJob, tuple, tuple[str, str]]] = {}  # by job id
        self.present: dict[int, PendingJob] = {}  # the last update's jobs, by id
        self.lists: dict[tuple[str, str], list[tuple[tuple, PendingJob]]] = {}
        self.levels: dict[int, int] = {}  # job id -> its level, when not 0
        # how many jobs of each shape (``memo.shape_of``) each user's queue holds, for the
        # groups of its jobs from a place on (``groups_from``)
        self.shapes: dict[tuple[str, str], Counter[tuple]] = {}
        self.demands = DemandCache()  # one per update: requests differ over time
        # the GPUs the jobs ask for by team (``Ledger``): counted by size, but those asking
        # for GPU memory alone, whose share depends on the pool's GPUs
        self.counted: dict[str, Counter[float]] = {}
        self.by_memory: dict[str, dict[int, PendingJob]] = {}
        # when each job of a level above 0 would starve, with the job's id and a count of
        # pushes (apart entries alike), the job (entries of jobs gone are skipped)
        self.starving: list[tuple[float, int, int, PendingJob]] = []
        self.pushed = 0

    @staticmethod
    def keeps(policy: Policy) -> bool:
        return policy.order != "srtf"

    def update(self, pending: Iterable[PendingJob], now: float) -> bool:
        """Become the queues of ``pending`` at ``now``; False (and nothing kept) when a job
        id is repeated: ids would not tell its jobs apart."""
        if now < self.now:  # a clock gone back: starved jobs would not be starved
            self._clear()
        self.now = now
        self.demands = DemandCache()
        if not isinstance(pending, tuple | list):
            pending = tuple(pending)
        jobs = by_key(pending, JOB_ID)
        if len(jobs) != len(pending):
            self._clear()
            return False
        kept = self.jobs
        gone, _ = changes(self.present, jobs)
        for job in gone:  # jobs gone, and those requeued as another job object
            self._remove(job.job_id)
        self.present = jobs
        self._starve(now)
        for job_id in jobs.keys() - kept.keys():
            self._add(jobs[job_id], now)
        return True

    def _where(self, job: PendingJob) -> tuple[str, str]:
        return (FIFO_TEAM, FIFO_TEAM) if self.fifo else (job.team, job.user)

    def _add(self, job: PendingJob, now: float) -> None:
        key, starves = queue_key(job, now, self.policy, self.state, self.service)
        if key[1]:
            self.levels[job.job_id] = key[1]
            if starves != float("inf"):
                self.pushed += 1
                heapq.heappush(self.starving, (starves, job.job_id, self.pushed, job))
        where = (FIFO_TEAM, FIFO_TEAM) if self.fifo else (job.team, job.user)
        self.jobs[job.job_id] = (job, key, where)
        self._count(job, 1)
        self.shapes.setdefault(where, Counter())[shape_of(job, self.demands, self.state)] += 1
        insort(self.lists.setdefault(where, []), (key, job), key=_first)

    def _remove(self, job_id: int) -> None:
        job, key, where = self.jobs.pop(job_id)
        self._count(job, -1)
        shapes = self.shapes[where]
        shape = shape_of(job, self.demands, self.state)
        shapes[shape] -= 1
        if not shapes[shape]:
            del shapes[shape]
        entries = self.lists[where]
        at = bisect_left(entries, key, key=_first)
        del entries[at]
        if not entries:
            del self.lists[where], self.shapes[where]
        if self.levels.get(job.job_id) == key[1] and key[1]:
            del self.levels[job.job_id]

    def _count(self, job: PendingJob, sign: int) -> None:
        gpus = fixed_gpus(job)
        if gpus is None:
            if sign > 0:
                self.by_memory.setdefault(job.team, {})[job.job_id] = job
            else:
                del self.by_memory[job.team][job.job_id]
            return
        counted = self.counted.setdefault(job.team, Counter())
        counted[gpus] += sign
        if not counted[gpus]:
            del counted[gpus]

    def waiting(self, gpu_memories: list[int]) -> dict[str, float]:
        """The GPUs the pending jobs ask for, by team, as ``ledger.waiting_by_team``."""
        result: dict[str, float] = {}
        for team in sorted(self.counted.keys() | self.by_memory.keys()):
            counted = self.counted.get(team, Counter())
            memory = self.by_memory.get(team)
            if memory:
                counted = counted.copy()
                for job in memory.values():
                    counted[job_gpus(job, gpu_memories)] += 1
            if counted:
                result[team] = total_gpus(counted)
        return result

    def groups_from(self, where: tuple[str, str], start: int) -> list[Group]:
        """The groups of a user's jobs from ``start`` on: those of the shapes its queue
        holds, less the shapes of the jobs before ``start`` (few: those handed out)."""
        shapes = self.shapes.get(where)
        if not shapes:
            return []
        if start:
            shapes = shapes.copy()
            for _, job in self.lists[where][:start]:
                shape = shape_of(job, self.demands, self.state)
                shapes[shape] -= 1
                if not shapes[shape]:
                    del shapes[shape]
        return groups_of_shapes(shapes)

    def _starve(self, now: float) -> None:
        """Move the jobs that have waited long enough to level 0."""
        starving, later = self.starving, []
        while starving and starving[0][0] <= now + 1.0:
            entry = heapq.heappop(starving)
            job = entry[3]
            found = self.jobs.get(job.job_id)
            if found is None or found[0] is not job or not found[1][1]:
                continue  # gone, or starved already
            _, queued, threshold = las_key(job, self.policy, self.state, self.service)
            if now - queued < threshold:  # by a rounding of queued + threshold
                later.append(entry)
                continue
            self._remove(job.job_id)
            self._add(job, now)
        for entry in later:
            heapq.heappush(starving, entry)
        if len(starving) > 2 * len(self.jobs) + 64:  # mostly jobs gone: keep those still here
            kept = self.jobs
            self.starving = [e for e in starving if kept.get(e[1], (None,))[0] is e[3]]
            heapq.heapify(self.starving)


JOB_ID = attrgetter("job_id")  # what names a pending job among a snapshot's


@contextmanager
def leased_order(
    state: SchedulerState,
    pending: Iterable[PendingJob],
    policy: Policy,
    now: float,
    service: ServiceDistribution | None = None,
) -> Iterator[KeptOrder | None]:
    """The state's order, brought up to date for one cycle (None: the cycle orders its
    own). A cycle that fails leaves the state none (nothing half changed). ``service``:
    the snapshot's (``order`` "gittins" only; another one sorts the queues anew)."""
    if not KeptOrder.keeps(policy):
        yield None
        return
    service = service if policy.order == "gittins" else None
    kept, state.order = state.order, None
    same = kept is not None and (kept.policy is policy or kept.policy == policy)
    if kept is None or not same or kept.service is not service:
        kept = KeptOrder(policy, state, service)
    if not kept.update(pending, now):
        yield None
        return
    yield kept
    state.order = kept
