"""The running jobs as possible victims: each job (all its tasks), its level, the work a
restart loses, by node; kept from one cycle to the next (``KeptRunning``), which tells the
parked jobs what came, changed and went (``parking``)."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from gpupool.domain.policy import Policy
from gpupool.scheduler.kept import ALLOCATION_KEY
from gpupool.scheduler.ledger import held_gpus
from gpupool.scheduler.ordering import LEVELLED, just_reached
from gpupool.scheduler.parking import Parking
from gpupool.scheduler.state import SchedulerState, allocations_by_key, allocations_changed
from gpupool.scheduler.types import Allocation


@dataclass(slots=True)
class RunningJob:
    """A running job (all its tasks) as a possible victim."""

    job_id: int
    team: str
    priority: int
    preemptible: bool
    stopping: bool
    started_at: float
    level: float  # least-attained-service level (+0.5 where ``dlas_queues`` says so)
    remaining: float
    lost: float  # seconds since its last checkpoint (or start)
    gpus: float
    allocations: list[Allocation] = field(default_factory=list)
    standing: float = 1.0  # a trial's standing in its experiment (``Allocation.standing``)

    @property
    def work_lost(self) -> float:
        """GPU-seconds a restart loses: its GPUs times the time since its last checkpoint."""
        return self.lost * self.gpus

    def rank(self) -> tuple:
        """The victim order, stopping jobs first (no cost): the lowest priority, the highest
        level, the worst standing, the least work lost (``VictimCost`` compares a set of
        victims by the same figures)."""
        return (
            0 if self.stopping else 1,
            self.priority,
            -self.level,
            self.standing,
            self.work_lost,
            self.job_id,
        )

    def key(self, team: str) -> tuple:
        """``rank``, other teams' jobs before those of ``team`` (the preemptor's)."""
        return (0 if self.stopping else 1, 0 if self.team != team else 1, *self.rank()[1:])


def running_jobs(
    allocations: Sequence[Allocation], policy: Policy, now: float, remaining: Mapping[int, float]
) -> dict[int, RunningJob]:
    """The running jobs of these allocations, as possible victims (see ``KeptRunning``)."""
    return KeptRunning(policy, SchedulerState()).update(allocations, now, remaining)


class KeptRunning:
    """The running jobs (all tasks of each) as possible victims, kept from one cycle to the
    next (``leased_running``; ``running_jobs``: for one cycle only).

    Between two cycles few allocations come or go: the jobs they belong to are worked out
    again, the others kept; what time changes is worked out for every job: the work a
    restart loses (since its last checkpoint, or start) and its least-attained-service
    level (the attained service of its first task, earlier attempts plus its GPUs times the
    time this one ran, its other tasks adding only their service in this attempt). The
    possible victims by node are kept the same way. A job's tasks stay in the order of the
    snapshot they came in. Each cycle's jobs are this object's: not to be kept."""

    def __init__(self, policy: Policy, state: SchedulerState) -> None:
        self.policy = policy
        self.state = state  # its owner's: the GPUs each allocation holds
        # by (job id, task); None: unknown (keys were repeated), every job worked out anew
        self.allocations: dict[tuple, Allocation] | None = {}
        self.jobs: dict[int, RunningJob] = {}
        self.by_node: dict[str, list[RunningJob]] = defaultdict(list)
        # per job, what time changes is worked out from: the job, when its restart would
        # lose work from, its allocations' (attained, GPUs, start), and the attained of its
        # later ones (its level)
        self._clock: dict[
            int, tuple[RunningJob, float, list[tuple[float, float, float]], list]
        ] = {}
        self._last_now: float | None = None  # the time of the last ``_advance``

    def update(
        self, allocations: Sequence[Allocation], now: float, remaining: Mapping[int, float]
    ) -> dict[int, RunningJob]:
        present = allocations_by_key(self.state, allocations)
        repeated = len(present) != len(allocations)
        parking = self.state.parking
        if self.allocations is None or repeated:
            touched = set(self.jobs)
            touched.update(allocation.job_id for allocation in allocations)
            parking.running_changed()
        else:
            gone, come = _real_changes(self.state, self.allocations, present)
            touched = {allocation.job_id for allocation in gone}
            touched.update(allocation.job_id for allocation in come)
            _tell_parking(parking, self.allocations, gone, come)
        self.allocations = None if repeated else present
        added: set[int] = set()
        if touched:
            parts: dict[int, list[Allocation]] = {}
            for allocation in allocations:  # in the snapshot's order
                if allocation.job_id in touched:
                    parts.setdefault(allocation.job_id, []).append(allocation)
            for job_id in touched:
                self._forget(job_id)
                if job_id in parts:
                    self._add(parts[job_id])
                    added.add(job_id)
        self._advance(now, remaining, added)
        return self.jobs

    def _forget(self, job_id: int) -> None:
        job = self.jobs.pop(job_id, None)
        if job is None:
            return
        del self._clock[job_id]
        for node in {allocation.node for allocation in job.allocations}:
            on = self.by_node.get(node, [])
            for at, other in enumerate(on):
                if other is job:
                    del on[at]
                    break
            if not on:
                self.by_node.pop(node, None)

    def _add(self, allocations: list[Allocation]) -> None:
        first = allocations[0]
        job_id = first.job_id
        job = RunningJob(
            job_id,
            first.team,
            first.priority,
            first.preemptible,
            first.stopping,
            first.started_at,
            0,
            0.0,
            0.0,
            0.0,
            [],
            1.0 if first.standing is None else first.standing,
        )
        served: list[tuple[float, float, float]] = []
        for allocation in allocations:
            gpus = held_gpus(allocation, self.state)
            served.append((allocation.attained, gpus, allocation.started_at))
            job.allocations.append(allocation)
            job.gpus += gpus
            job.stopping = job.stopping or allocation.stopping
        since = first.checkpoint_at if first.checkpoint_at is not None else None
        since = max(since or first.started_at, first.started_at)
        later = [allocation.attained for allocation in allocations[1:]]
        self._clock[job_id] = (job, since, served, later)
        self.jobs[job_id] = job
        if job.preemptible or job.stopping:
            for node in {allocation.node for allocation in allocations}:
                self.by_node[node].append(job)

    def _advance(
        self, now: float, remaining: Mapping[int, float], added: set[int] | frozenset = frozenset()
    ) -> None:
        """The work a restart loses, the remaining work (``srtf``) and the level of each job
        at ``now``; a job that became a victim for its own team's jobs (past ``min_runtime``,
        at a new level; ``added``: the jobs just worked out) is told to the parking."""
        las = self.policy.order in LEVELLED
        thresholds = self.policy.las_thresholds
        min_runtime = self.policy.min_runtime
        left = remaining.get
        parking = self.state.parking
        last, self._last_now = self._last_now, now
        for job_id, (job, since, served, earlier) in self._clock.items():
            job.lost = max(0.0, now - since)
            job.remaining = left(job_id, 0.0)
            ripe = job.started_at + min_runtime <= now
            # past ``min_runtime`` since the last cycle (or just come): a victim for its team
            news = ripe and (
                job_id in added or (last is not None and last < job.started_at + min_runtime)
            )
            if not las:
                if news:
                    parking.ripe(job.team, (-job.priority, job.level))
                continue
            was = job.level
            if earlier:
                level = sum(
                    attained + gpus * max(0.0, now - started) for attained, gpus, started in served
                ) - sum(earlier)
            else:
                attained, gpus, started = served[0]
                level = attained + gpus * max(0.0, now - started)
            job.level = bisect_right(thresholds, level)
            if self.policy.dlas_queues and job.level and served[0][0] < thresholds[job.level - 1]:
                # reached in this attempt: behind the jobs waiting at its level for a moment
                job.level += 0.5 if just_reached(level, job.gpus, job.level, self.policy) else 0
            if news or (ripe and job.level > was):
                parking.ripe(job.team, (-job.priority, job.level))


def _real_changes(
    state: SchedulerState, known: dict[tuple, Allocation], present: dict[tuple, Allocation]
) -> tuple[list[Allocation], list[Allocation]]:
    """``kept.changes``, less the allocations read anew but equal to those known."""
    gone, come = allocations_changed(state, known, present)
    if not come:
        return gone, come
    same = {
        key
        for key in map(ALLOCATION_KEY, come)
        if key in known and key in present and known[key] == present[key]
    }
    if not same:
        return gone, come
    return (
        [a for a in gone if ALLOCATION_KEY(a) not in same],
        [a for a in come if ALLOCATION_KEY(a) not in same],
    )


def _tell_parking(parking: Parking, known: dict[tuple, Allocation], gone: list, come: list) -> None:
    """Tell the parked jobs' stamps what came (a new running job), what changed (a stop
    under way: ``Parking.changed``) and what went (its team holds less; the GPUs it frees
    are the capacity's to stamp) (``_real_changes``)."""
    for allocation in come:
        if ALLOCATION_KEY(allocation) in known:
            parking.changed(allocation.job_id, allocation.team)
        else:
            parking.running_came(allocation.team)
    for allocation in gone:
        parking.held_less(allocation.team)


@contextmanager
def leased_running(state: SchedulerState, policy: Policy) -> Iterator[KeptRunning]:
    """The state's running jobs for one cycle (see ``KeptRunning``). A cycle that fails
    leaves the state none (nothing half changed)."""
    kept, state.running = state.running, None
    if kept is None or not (kept.policy is policy or kept.policy == policy):
        kept = KeptRunning(policy, state)
    yield kept
    state.running = kept


def any_victim(allocations: Iterable[Allocation]) -> bool:
    """Whether ``running_jobs`` of these allocations holds a job preemptible or stopping."""
    seen: set[int] = set()
    for allocation in allocations:
        if allocation.stopping:
            return True
        if allocation.job_id not in seen:
            seen.add(allocation.job_id)
            if allocation.preemptible:
                return True
    return False
