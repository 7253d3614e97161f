"""Estimated start times of pending jobs: the real scheduler run forward on a virtual clock.

The predictor takes the current snapshot (what runs, what waits, quotas, usage), assumes how
long each job runs, and lets ``gpupool.sim.forward`` play the scheduler's cycles forward until
every waiting job has started or a bound is hit. Nobody knows how long a job will run, so each
job's duration is assumed, in this order:

1. its ``max_runtime_seconds`` (it cannot run longer);
2. the median run time of its user's recent succeeded jobs;
3. the median of its team's;
4. ``DEFAULT_DURATION`` (one hour).

A running job that has run ``E`` seconds is assumed to end at its max runtime, else after the
median of its user's (then its team's) finished jobs that ran longer than ``E``: what has
already run is evidence, so a long job does not stay "a minute from its end" for hours. Without
history the default applies while ``E`` is below it. A job that has outrun every such guess is
assumed to run as long again (``E``-doubling); a waiting job whose start rests only on the ends
of such jobs gets no estimate, and says why. A stopping job ends within ``STOPPING_LEFT``.
Nothing submitted later is foreseen, so a job may start later (others come first by fair share
or priority) or sooner (jobs end early, jobs are cancelled) than estimated.

Bounds keep the work small whatever the queue holds: the first ``max_jobs`` waiting jobs in
queue order are simulated, ``horizon`` seconds ahead, in at most ``max_cycles`` scheduler calls;
a forecast is reused for ``refresh_seconds`` (and answered while the next one is computed).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobStatus
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.units import format_duration
from gpupool.domain.waiting import PendingReason
from gpupool.scheduler.types import Allocation, Clock, Decisions, Snapshot
from gpupool.services.core import (
    Bounds,
    Duration,
    Forecast,
)
from gpupool.services.scheduling._snapshots import NodeCache, SnapshotBuilder
from gpupool.services.scheduling._usage import UsageTracker
from gpupool.sim.forward import ForwardState, Running, Waiting, forward
from gpupool.store.db import Database
from gpupool.store.models import JobModel, TeamModel, UserModel

DEFAULT_DURATION = 3600.0
STOPPING_LEFT = 30.0
HISTORY_JOBS = 2000  # recent succeeded jobs read for the medians
# a scheduler to run forward (None: ``gpupool.scheduler.schedule``, each forward run with a
# ``SchedulerState`` of its own)
Decide = Callable[[Snapshot, Clock], Decisions]


@dataclass(frozen=True)
class Left:
    """How long a running job is assumed to have left, and why: ``basis`` is "max_runtime",
    "user_longer" or "team_longer" (the median of the finished jobs that ran longer than it has
    so far), "default", "stopping" or "outrun" (longer than every guess: as long again)."""

    seconds: float
    basis: str

    @property
    def outrun(self) -> bool:
        return self.basis == "outrun"


@dataclass(frozen=True)
class Durations:
    """Run times of recent succeeded jobs, by user and by team, each sorted ascending."""

    by_user: Mapping[str, Sequence[float]] = field(default_factory=dict)
    by_team: Mapping[str, Sequence[float]] = field(default_factory=dict)
    default: float = DEFAULT_DURATION

    @classmethod
    def load(cls, session: Session, limit: int = HISTORY_JOBS) -> Durations:
        rows = session.execute(
            select(UserModel.name, TeamModel.name, JobModel.started_at, JobModel.ended_at)
            .join(UserModel, UserModel.id == JobModel.user_id)
            .join(TeamModel, TeamModel.id == JobModel.team_id)
            .where(
                JobModel.status == JobStatus.SUCCEEDED.value,
                JobModel.started_at.is_not(None),
                JobModel.ended_at.is_not(None),
            )
            .order_by(JobModel.ended_at.desc())
            .limit(limit)
        )
        users: dict[str, list[float]] = defaultdict(list)
        teams: dict[str, list[float]] = defaultdict(list)
        for user, team, started, ended in rows:
            users[user].append(max(0.0, ended - started))
            teams[team].append(max(0.0, ended - started))
        return cls(_sorted(users), _sorted(teams))

    def of(self, user: str, team: str, max_runtime: float | None) -> Duration:
        """How long a job that has not started yet is assumed to run."""
        if max_runtime:
            return Duration(max_runtime, "max_runtime")
        if self.by_user.get(user):
            return Duration(_median(self.by_user[user]), "user_median")
        if self.by_team.get(team):
            return Duration(_median(self.by_team[team]), "team_median")
        return Duration(self.default, "default")

    def left(self, user: str, team: str, max_runtime: float | None, ran: float) -> Left:
        """How long a job that has run ``ran`` seconds is assumed to have left: its run time
        is drawn from the finished jobs that ran longer than that (it has outrun the rest)."""
        if max_runtime:
            return Left(max(0.0, max_runtime - ran), "max_runtime")
        for basis, samples in (("user", self.by_user.get(user)), ("team", self.by_team.get(team))):
            longer = bisect.bisect_right(samples or (), ran)
            if samples and longer < len(samples):
                return Left(_median(samples, longer) - ran, f"{basis}_longer")
        if not self.by_user.get(user) and not self.by_team.get(team) and ran < self.default:
            return Left(self.default - ran, "default")
        return Left(ran, "outrun")


def assumptions(bounds: Bounds) -> list[str]:
    """What every estimate assumes, in words."""
    return [
        "jobs run as long as their max runtime, else their user's (then team's) median run "
        f"time, else {format_duration(DEFAULT_DURATION)}",
        "a running job ends after the median of its user's (then team's) finished jobs that "
        "ran longer than it has so far; one that has outrun them all runs as long again",
        "no new job is submitted and none is cancelled",
        f"the scheduler is simulated up to {format_duration(bounds.horizon)} ahead",
    ]


def predict(
    snapshot: Snapshot,
    durations: Durations,
    now: float,
    order: Mapping[int, PendingReason] | None = None,
    bounds: Bounds = Bounds(),
    decide: Decide | None = None,
) -> Forecast:
    """A forecast from a snapshot (pure: no database, no wall clock)."""
    queue = sorted(snapshot.pending, key=lambda job: _queue_key(job, order or {}))
    kept, rest = queue[: bounds.max_jobs], queue[bounds.max_jobs :]
    assumed = {j.job_id: durations.of(j.user, j.team, j.max_runtime) for j in kept}
    running = _running(snapshot.allocations, durations, now)
    state = ForwardState(
        now=now,
        nodes=snapshot.nodes,
        running=[job for job, _ in running],
        waiting=[Waiting(job, assumed[job.job_id].seconds) for job in kept],
        quotas=snapshot.quotas,
        usage=dict(snapshot.usage),
        weights=snapshot.weights,
        policy=snapshot.policy,
    )
    result = forward(state, decide, horizon=bounds.horizon, max_cycles=bounds.max_cycles)
    beyond = frozenset(job.job_id for job in rest)
    guessed = _on_guesses(state, running, result.starts, bounds, decide)
    return Forecast(now, result.starts, assumed, beyond, result.stopped, bounds, guessed)


class EtaPredictor:
    """Forecasts for the API, recomputed at most every ``bounds.refresh_seconds``.

    It keeps its own snapshot builder (the control loop's belongs to the loop's thread) and
    shares the node cache, which is thread-safe. One forecast is computed at a time.
    """

    def __init__(
        self,
        nodes: NodeCache,
        half_life: float,
        bounds: Bounds = Bounds(),
        decide: Decide | None = None,
        policy: Policy = DEFAULT_POLICY,
    ) -> None:
        self.builder = SnapshotBuilder(nodes=nodes, usage=UsageTracker(half_life), policy=policy)
        self.bounds, self.decide = bounds, decide
        self._lock = threading.Lock()
        self._forecast: Forecast | None = None
        self._made = 0.0

    def forecast(
        self,
        db: Database,
        now: float,
        order: Mapping[int, PendingReason] | None = None,
        want: int | None = None,
    ) -> Forecast:
        """The latest forecast; a new one when it is old, or (after a second) when it does
        not know the job ``want`` yet. While another request computes one, the previous is
        answered rather than waiting for it."""
        held = self._forecast
        if held is not None and not self._stale(want):
            return held
        if held is not None and not self._lock.acquire(blocking=False):
            return held
        if held is None:
            self._lock.acquire()
        try:
            if self._forecast is not None and not self._stale(want):
                return self._forecast
            with db.reader() as session:
                snapshot = self.builder.build(session, now)
                durations = Durations.load(session)
            self._forecast = predict(snapshot, durations, now, order, self.bounds, self.decide)
            self._made = time.monotonic()
            return self._forecast
        finally:
            self._lock.release()

    def _stale(self, want: int | None) -> bool:
        if self._forecast is None:
            return True
        age = time.monotonic() - self._made
        if age >= self.bounds.refresh_seconds:
            return True
        return want is not None and not self._forecast.knows(want) and age >= 1.0


def _queue_key(job, order: Mapping[int, PendingReason]) -> tuple:  # noqa: ANN001
    """Teams' queues interleaved by position (the scheduler's order, roughly); jobs it has
    not placed in a queue yet by priority, then age."""
    reason = order.get(job.job_id)
    position = reason.position if reason is not None else 1 << 30
    return (position, -job.priority, job.queued_at or job.submitted_at, job.job_id)


def _running(
    allocations: tuple[Allocation, ...], durations: Durations, now: float
) -> list[tuple[Running, Left]]:
    by_job: dict[int, list[Allocation]] = defaultdict(list)
    for allocation in allocations:
        by_job[allocation.job_id].append(allocation)
    found = []
    for held in by_job.values():
        left = _left(held[0], durations, now)
        found.append((Running(tuple(held), left.seconds), left))
    return found


def _left(allocation: Allocation, durations: Durations, now: float) -> Left:
    """The seconds a running job is assumed to have left."""
    if allocation.stopping:
        return Left(STOPPING_LEFT, "stopping")
    ran = max(0.0, now - allocation.started_at)
    return durations.left(allocation.user, allocation.team, allocation.max_runtime, ran)


def _on_guesses(
    state: ForwardState,
    running: list[tuple[Running, Left]],
    starts: Mapping[int, float],
    bounds: Bounds,
    decide: Decide | None,
) -> frozenset[int]:
    """The waiting jobs that start only because jobs that outran every estimate end as
    guessed: run forward again with those jobs never ending, they do not start."""
    if not any(left.outrun for _, left in running):
        return frozenset()
    never = bounds.horizon * 2  # past the horizon: not seen to end
    held = [replace(job, remaining=never) if left.outrun else job for job, left in running]
    without = forward(
        replace(state, running=held), decide, horizon=bounds.horizon, max_cycles=bounds.max_cycles
    )
    return frozenset(job_id for job_id in starts if job_id not in without.starts)


def _sorted(samples: Mapping[str, list[float]]) -> dict[str, tuple[float, ...]]:
    return {key: tuple(sorted(values)) for key, values in samples.items() if values}


def _median(ordered: Sequence[float], start: int = 0) -> float:
    """The median of ``ordered[start:]`` (sorted ascending), without copying it."""
    count = len(ordered) - start
    middle = start + count // 2
    if count % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
