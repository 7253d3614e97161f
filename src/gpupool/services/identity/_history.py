"""Each team's GPUs over the last hours: held, wanted, and its fair share, from jobs and attempts.

No table of its own: for each time bucket, a team **held** the GPUs of its attempts that
overlap the bucket (weighted by the part of the bucket they cover, so a bucket's value is its
average); it **wanted** that plus the GPUs of its jobs queued then (submitted and not started,
or back in the queue between two attempts). Its **fair share** is the scheduler's own
``water_fill`` of the pool over the teams' guarantees, limits, weights and those demands.

The quotas and the pool's size of a bucket are those in force at its start: the last of
``quota_changes`` and ``pool_changes`` at or before it; before the first record, the earliest
one; with none at all (a database older than the records), today's. The values *now* use
today's. Assumption, said on the page: a job's GPUs are what it asked for, all its tasks
together.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpupool.scheduler.ledger import UNLIMITED, water_fill
from gpupool.scheduler.types import TeamQuota
from gpupool.store.models import (
    AttemptModel,
    JobModel,
    PoolChangeModel,
    QuotaChangeModel,
    TeamModel,
)

MAX_BUCKETS = 500


@dataclass(frozen=True)
class Window:
    """``buckets`` equal time buckets ending at ``end``."""

    end: float
    hours: float
    buckets: int

    @property
    def start(self) -> float:
        return self.end - self.hours * 3600.0

    @property
    def width(self) -> float:
        return self.hours * 3600.0 / self.buckets

    def starts(self) -> list[float]:
        return [self.start + i * self.width for i in range(self.buckets)]


@dataclass(frozen=True)
class TeamSeries:
    """One team's values per bucket (average GPUs over the bucket); ``guarantee``, ``limit``
    and ``weight`` are today's, ``guarantees`` the guarantee in force in each bucket."""

    team: str
    guarantee: float
    limit: float | None
    weight: float
    held: list[float]
    demand: list[float]
    fair: list[float]
    guarantees: list[float]
    held_now: float = 0.0
    demand_now: float = 0.0
    fair_now: float = 0.0


@dataclass(frozen=True)
class History:
    window: Window
    pool_gpus: float
    teams: list[TeamSeries]


def team_history(
    session: Session, quotas: Sequence[TeamQuota], pool_gpus: float, window: Window
) -> History:
    """Held GPUs, demand and fair share of every team in ``quotas``, bucket by bucket.

    ``quotas`` and ``pool_gpus``: today's, for the values now and where nothing is recorded."""
    names = [quota.team for quota in quotas]
    terms = _terms_by_bucket(session, quotas, pool_gpus, window)
    held_spans = list(_held_intervals(session, window))
    queued_spans = list(_queued_intervals(session, window))
    held = _spread(held_spans, window, names)
    queued = _spread(queued_spans, window, names)
    demand = {
        team: [h + q for h, q in zip(held[team], queued[team], strict=True)] for team in names
    }
    fair = _fair_shares(terms, demand)
    held_now = _at(held_spans, window.end, names)
    demand_now = {
        team: held_now[team] + q for team, q in _at(queued_spans, window.end, names).items()
    }
    fair_now = _fair_shares([Terms.of(quotas, pool_gpus)], {t: [v] for t, v in demand_now.items()})
    return History(
        window,
        pool_gpus,
        [
            TeamSeries(
                quota.team,
                sum(quota.guarantee.values()),
                quota.limit,
                quota.weight,
                _rounded(held[quota.team]),
                _rounded(demand[quota.team]),
                _rounded(fair[quota.team]),
                _rounded([term.guarantees[quota.team] for term in terms]),
                round(held_now[quota.team], 3),
                round(demand_now[quota.team], 3),
                round(fair_now[quota.team][0], 3),
            )
            for quota in quotas
        ],
    )


@dataclass(frozen=True)
class Terms:
    """What fair shares are worked out from at one moment: the pool's size and the teams'
    guarantees (in all), limits and weights."""

    pool_gpus: float
    guarantees: Mapping[str, float]
    limits: Mapping[str, float]
    weights: Mapping[str, float]

    @classmethod
    def of(cls, quotas: Iterable[TeamQuota], pool_gpus: float) -> Terms:
        quotas = list(quotas)
        return cls(
            pool_gpus,
            {q.team: sum(q.guarantee.values()) for q in quotas},
            {q.team: UNLIMITED if q.limit is None else q.limit for q in quotas},
            {q.team: q.weight if q.weight > 0 else 1.0 for q in quotas},
        )

    def shares(self, wanted: Mapping[str, float]) -> dict[str, float]:
        if not wanted:
            return {}
        return water_fill(self.pool_gpus, wanted, self.guarantees, self.limits, self.weights)


Interval = tuple[str, float, float, float]  # team, start, end (inf: not ended), GPUs
QuotaChange = tuple[float, TeamQuota]  # in force from, quota
PoolChange = tuple[float, float]  # in force from, GPUs


def _terms_by_bucket(
    session: Session, quotas: Sequence[TeamQuota], pool_gpus: float, window: Window
) -> list[Terms]:
    """The terms in force at each bucket's start (buckets under the same terms share them)."""
    teams = {quota.team: quota for quota in quotas}
    changes = _quota_changes(session, teams)
    pools = _pool_changes(session)
    built: dict[tuple[int, ...], Terms] = {}
    terms = []
    for start in window.starts():
        key = (_index_at(pools, start), *(_index_at(changes[t], start) for t in teams))
        if key not in built:
            pool = pools[key[0]][1] if pools else pool_gpus
            in_force = [
                changes[team][index][1] if changes[team] else today
                for (team, today), index in zip(teams.items(), key[1:], strict=True)
            ]
            built[key] = Terms.of(in_force, pool)
        terms.append(built[key])
    return terms


def _quota_changes(
    session: Session, teams: Mapping[str, TeamQuota]
) -> dict[str, list[QuotaChange]]:
    """Team -> its recorded quotas, oldest first."""
    changes: dict[str, list[QuotaChange]] = {team: [] for team in teams}
    rows = session.execute(
        select(
            TeamModel.name,
            QuotaChangeModel.at,
            QuotaChangeModel.guarantee,
            QuotaChangeModel.gpu_limit,
            QuotaChangeModel.weight,
        )
        .join(TeamModel, TeamModel.id == QuotaChangeModel.team_id)
        .where(TeamModel.deleted_at.is_(None))  # a deleted team's name may be taken again
        .order_by(QuotaChangeModel.at, QuotaChangeModel.id)
    )
    for team, at, guarantee, limit, weight in rows:
        if team in changes:
            quota = TeamQuota(team, _guarantee(guarantee), limit, weight)
            changes[team].append((at, quota))
    return changes


def _pool_changes(session: Session) -> list[PoolChange]:
    rows = session.execute(
        select(PoolChangeModel.at, PoolChangeModel.gpus).order_by(
            PoolChangeModel.at, PoolChangeModel.id
        )
    )
    return [(at, float(gpus)) for at, gpus in rows]


def _index_at(changes: Sequence[tuple[float, object]], moment: float) -> int:
    """The index of the last change at or before ``moment``; before the first, the first."""
    return max(bisect.bisect_right(changes, moment, key=lambda change: change[0]) - 1, 0)


def _guarantee(stored: object) -> dict[str, float]:
    """A recorded guarantee; anything but a mapping of numbers counts as none."""
    if not isinstance(stored, dict):
        return {}
    return {k: float(v) for k, v in stored.items() if isinstance(v, int | float)}


def _held_intervals(session: Session, window: Window) -> Iterable[Interval]:
    rows = session.execute(
        select(TeamModel.name, AttemptModel.started_at, AttemptModel.ended_at, JobModel.gpus)
        .join(JobModel, JobModel.id == AttemptModel.job_id)
        .join(TeamModel, TeamModel.id == JobModel.team_id)
        .where(
            TeamModel.deleted_at.is_(None),  # a deleted team's name may be taken again
            AttemptModel.started_at.is_not(None),
            AttemptModel.started_at < window.end,
            or_(AttemptModel.ended_at.is_(None), AttemptModel.ended_at > window.start),
            JobModel.gpus > 0,
        )
    )
    for team, started, ended, gpus in rows:
        yield team, started, ended if ended is not None else math.inf, gpus


def _queued_intervals(session: Session, window: Window) -> Iterable[Interval]:
    """A job waits from its submit to its first attempt, between attempts, and (if it never
    started again) until it ended (or on)."""
    jobs = session.execute(
        select(JobModel.id, TeamModel.name, JobModel.submitted_at, JobModel.ended_at, JobModel.gpus)
        .join(TeamModel, TeamModel.id == JobModel.team_id)
        .where(
            TeamModel.deleted_at.is_(None),  # a deleted team's name may be taken again
            JobModel.submitted_at < window.end,
            or_(JobModel.ended_at.is_(None), JobModel.ended_at > window.start),
            JobModel.gpus > 0,
        )
    ).all()
    attempts: dict[int, list[tuple[float, float | None]]] = defaultdict(list)
    ids = [job.id for job in jobs]
    for chunk in range(0, len(ids), 900):  # SQLite's limit on bound parameters
        rows = session.execute(
            select(AttemptModel.job_id, AttemptModel.created_at, AttemptModel.ended_at)
            .where(AttemptModel.job_id.in_(ids[chunk : chunk + 900]))
            .order_by(AttemptModel.job_id, AttemptModel.number)
        )
        for job_id, created, ended in rows:
            attempts[job_id].append((created, ended))
    for job_id, team, submitted, ended, gpus in jobs:
        yield from _waits(team, gpus, submitted, ended, attempts.get(job_id, []))


def _waits(
    team: str,
    gpus: float,
    submitted: float,
    ended: float | None,
    attempts: list[tuple[float, float | None]],
) -> Iterable[Interval]:
    since = submitted
    for created, attempt_end in attempts:
        if created > since:
            yield team, since, created, gpus
        if attempt_end is None:
            return
        since = attempt_end
    until = ended if ended is not None else math.inf
    if until > since:
        yield team, since, until, gpus


def _spread(
    intervals: Iterable[Interval], window: Window, teams: Sequence[str]
) -> dict[str, list[float]]:
    """Team -> average GPUs per bucket of the given intervals."""
    values = {team: [0.0] * window.buckets for team in teams}
    width, start = window.width, window.start
    for team, begin, end, gpus in intervals:
        series = values.get(team)
        if series is None:
            continue
        begin, end = max(begin, start), min(end, window.end)
        if end <= begin:
            continue
        first = int((begin - start) // width)
        last = min(int((end - start) // width), window.buckets - 1)
        for index in range(first, last + 1):
            low = start + index * width
            covered = min(end, low + width) - max(begin, low)
            if covered > 0:
                series[index] += gpus * covered / width
    return values


def _at(intervals: Iterable[Interval], moment: float, teams: Sequence[str]) -> dict[str, float]:
    """Team -> GPUs of the intervals going on at ``moment`` (those not ended count)."""
    values = dict.fromkeys(teams, 0.0)
    for team, begin, end, gpus in intervals:
        if team in values and begin <= moment < end:
            values[team] += gpus
    return values


def _fair_shares(terms: Sequence[Terms], demand: dict[str, list[float]]) -> dict[str, list[float]]:
    """Team -> its fair share per bucket, under the terms of each bucket."""
    fair: dict[str, list[float]] = {team: [] for team in demand}
    for index, term in enumerate(terms):
        wanted = {team: series[index] for team, series in demand.items() if series[index] > 0}
        shares = term.shares(wanted)
        for team in fair:
            fair[team].append(shares.get(team, 0.0))
    return fair


def _rounded(values: list[float]) -> list[float]:
    return [round(value, 3) for value in values]
