"""Estimated start times of pending jobs: the real scheduler run forward on a virtual clock.

The predictor takes the current snapshot (what runs, what waits, quotas, usage), assumes how
long each job runs, and lets ``gpupool.sim.forward`` play the scheduler's cycles forward until
every waiting job has started or a bound is hit. Nobody knows how long a job will run, so each
job's duration is assumed, in this order:

1. its ``max_runtime_seconds`` (it cannot run longer);
2. the median run time of its user's recent succeeded jobs;
3. the median of its team's;
4. ``DEFAULT_DURATION`` (one hour).

A running job is assumed to have that duration less the time it has run (at least
``MIN_REMAINING`` when it has run past it; a stopping job ends within ``STOPPING_LEFT``).
Nothing submitted later is foreseen, so a job may start later (others come first by fair share
or priority) or sooner (jobs end early, jobs are cancelled) than estimated.

Bounds keep the work small whatever the queue holds: the first ``max_jobs`` waiting jobs in
queue order are simulated, ``horizon`` seconds ahead, in at most ``max_cycles`` scheduler calls;
a forecast is reused for ``refresh_seconds`` (and answered while the next one is computed).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobStatus
from gpupool.domain.units import format_duration
from gpupool.scheduler import schedule
from gpupool.scheduler.types import (
    DEFAULT_POLICY,
    Allocation,
    Clock,
    Decisions,
    PendingReason,
    Policy,
    Snapshot,
)
from gpupool.services.snapshots import NodeCache, SnapshotBuilder
from gpupool.services.usage import UsageTracker
from gpupool.sim.forward import ForwardState, Running, Waiting, forward
from gpupool.store.db import Database
from gpupool.store.models import JobModel, TeamModel, UserModel

DEFAULT_DURATION = 3600.0
MIN_REMAINING = 60.0
STOPPING_LEFT = 30.0
HISTORY_JOBS = 2000  # recent succeeded jobs read for the medians
NOT_YET = "it was submitted after the last estimate; ask again in a few seconds"

Decide = Callable[[Snapshot, Clock], Decisions]


@dataclass(frozen=True)
class Bounds:
    """How much work one forecast may do."""

    max_jobs: int = 300
    horizon: float = 7 * 86400.0
    max_cycles: int = 300
    refresh_seconds: float = 5.0


@dataclass(frozen=True)
class Duration:
    """How long a job is assumed to run, and why (``basis``, said in words by ``text``)."""

    seconds: float
    basis: str  # "max_runtime", "user_median", "team_median", "default"

    @property
    def text(self) -> str:
        length = format_duration(round(self.seconds))
        return {
            "max_runtime": f"{length}, its max runtime",
            "user_median": f"{length}, the median of its user's finished jobs",
            "team_median": f"{length}, the median of its team's finished jobs",
        }.get(self.basis, f"{length}, the default for a job with no max runtime and no history")


@dataclass(frozen=True)
class Durations:
    """Median run times of recent succeeded jobs, by user and by team."""

    by_user: Mapping[str, float] = field(default_factory=dict)
    by_team: Mapping[str, float] = field(default_factory=dict)
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
        return cls(_medians(users), _medians(teams))

    def of(self, user: str, team: str, max_runtime: float | None) -> Duration:
        if max_runtime:
            return Duration(max_runtime, "max_runtime")
        if user in self.by_user:
            return Duration(self.by_user[user], "user_median")
        if team in self.by_team:
            return Duration(self.by_team[team], "team_median")
        return Duration(self.default, "default")


@dataclass(frozen=True)
class Estimate:
    """One job's estimated start (``at``, epoch seconds) or why there is none."""

    at: float | None
    unknown: str | None
    duration: Duration | None
    computed_at: float


@dataclass(frozen=True)
class Forecast:
    """Start estimates of the waiting jobs at ``computed_at``."""

    computed_at: float
    starts: Mapping[int, float]
    durations: Mapping[int, Duration]
    beyond_cap: frozenset[int]
    stopped: str
    bounds: Bounds

    def estimate(self, job_id: int) -> Estimate:
        duration = self.durations.get(job_id)
        if job_id in self.starts:
            return Estimate(self.starts[job_id], None, duration, self.computed_at)
        return Estimate(None, self._why_unknown(job_id), duration, self.computed_at)

    def knows(self, job_id: int) -> bool:
        return job_id in self.durations or job_id in self.beyond_cap

    def _why_unknown(self, job_id: int) -> str:
        bounds = self.bounds
        if job_id in self.beyond_cap:
            return (
                f"more than {bounds.max_jobs} jobs wait; only the first {bounds.max_jobs} in "
                "queue order are simulated"
            )
        if job_id not in self.durations:
            return NOT_YET
        if self.stopped == "stuck":
            return "it cannot start with the pool as it is: no running job would free room"
        if self.stopped == "cycles":
            return f"it did not start within the {bounds.max_cycles} scheduling cycles simulated"
        return f"it does not start within the next {format_duration(bounds.horizon)} simulated"


def assumptions(bounds: Bounds) -> list[str]:
    """What every estimate assumes, in words."""
    return [
        "jobs run as long as their max runtime, else their user's (then team's) median run "
        f"time, else {format_duration(DEFAULT_DURATION)}",
        "no new job is submitted and none is cancelled",
        f"the scheduler is simulated up to {format_duration(bounds.horizon)} ahead",
    ]


def predict(
    snapshot: Snapshot,
    durations: Durations,
    now: float,
    order: Mapping[int, PendingReason] | None = None,
    bounds: Bounds = Bounds(),
    decide: Decide = schedule,
) -> Forecast:
    """A forecast from a snapshot (pure: no database, no wall clock)."""
    queue = sorted(snapshot.pending, key=lambda job: _queue_key(job, order or {}))
    kept, rest = queue[: bounds.max_jobs], queue[bounds.max_jobs :]
    assumed = {j.job_id: durations.of(j.user, j.team, j.max_runtime) for j in kept}
    state = ForwardState(
        now=now,
        nodes=snapshot.nodes,
        running=_running(snapshot.allocations, durations, now),
        waiting=[Waiting(job, assumed[job.job_id].seconds) for job in kept],
        quotas=snapshot.quotas,
        usage=dict(snapshot.usage),
        weights=snapshot.weights,
        policy=snapshot.policy,
    )
    result = forward(state, decide, horizon=bounds.horizon, max_cycles=bounds.max_cycles)
    beyond = frozenset(job.job_id for job in rest)
    return Forecast(now, result.starts, assumed, beyond, result.stopped, bounds)


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
        decide: Decide = schedule,
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
) -> list[Running]:
    by_job: dict[int, list[Allocation]] = defaultdict(list)
    for allocation in allocations:
        by_job[allocation.job_id].append(allocation)
    return [Running(tuple(held), _left(held[0], durations, now)) for held in by_job.values()]


def _left(allocation: Allocation, durations: Durations, now: float) -> float:
    """The seconds a running job is assumed to have left."""
    if allocation.stopping:
        return STOPPING_LEFT
    assumed = durations.of(allocation.user, allocation.team, allocation.max_runtime)
    left = assumed.seconds - max(0.0, now - allocation.started_at)
    if assumed.basis == "max_runtime":
        return max(0.0, left)
    return max(MIN_REMAINING, left)


def _medians(samples: Mapping[str, list[float]]) -> dict[str, float]:
    return {key: statistics.median(values) for key, values in samples.items() if values}
