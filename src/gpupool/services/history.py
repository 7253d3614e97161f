"""Each team's GPUs over the last hours: held, wanted, and its fair share, from jobs and attempts.

No table of its own: for each time bucket, a team **held** the GPUs of its attempts that
overlap the bucket (weighted by the part of the bucket they cover, so a bucket's value is its
average); it **wanted** that plus the GPUs of its jobs queued then (submitted and not started,
or back in the queue between two attempts). Its **fair share** is the scheduler's own
``water_fill`` of the pool over the teams' guarantees, limits, weights and those demands.

Assumptions, said on the page: the pool's size and the teams' quotas are today's (neither is
recorded over time); a job's GPUs are what it asked for, all its tasks together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpupool.scheduler.ledger import UNLIMITED, water_fill
from gpupool.scheduler.types import TeamQuota
from gpupool.store.models import AttemptModel, JobModel, TeamModel

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
    """One team's values per bucket (average GPUs over the bucket)."""

    team: str
    guarantee: float
    limit: float | None
    weight: float
    held: list[float]
    demand: list[float]
    fair: list[float]
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
    """Held GPUs, demand and fair share of every team in ``quotas``, bucket by bucket."""
    names = [quota.team for quota in quotas]
    held_spans = list(_held_intervals(session, window))
    queued_spans = list(_queued_intervals(session, window))
    held = _spread(held_spans, window, names)
    queued = _spread(queued_spans, window, names)
    demand = {
        team: [h + q for h, q in zip(held[team], queued[team], strict=True)] for team in names
    }
    fair = _fair_shares(quotas, pool_gpus, demand, window.buckets)
    held_now = _at(held_spans, window.end, names)
    demand_now = {
        team: held_now[team] + q for team, q in _at(queued_spans, window.end, names).items()
    }
    fair_now = _fair_shares(quotas, pool_gpus, {t: [v] for t, v in demand_now.items()}, 1)
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
                round(held_now[quota.team], 3),
                round(demand_now[quota.team], 3),
                round(fair_now[quota.team][0], 3),
            )
            for quota in quotas
        ],
    )


Interval = tuple[str, float, float, float]  # team, start, end (inf: not ended), GPUs


def _held_intervals(session: Session, window: Window) -> Iterable[Interval]:
    rows = session.execute(
        select(TeamModel.name, AttemptModel.started_at, AttemptModel.ended_at, JobModel.gpus)
        .join(JobModel, JobModel.id == AttemptModel.job_id)
        .join(TeamModel, TeamModel.id == JobModel.team_id)
        .where(
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


def _fair_shares(
    quotas: Sequence[TeamQuota], pool_gpus: float, demand: dict[str, list[float]], buckets: int
) -> dict[str, list[float]]:
    guarantees = {q.team: sum(q.guarantee.values()) for q in quotas}
    limits = {q.team: UNLIMITED if q.limit is None else q.limit for q in quotas}
    weights = {q.team: q.weight if q.weight > 0 else 1.0 for q in quotas}
    fair: dict[str, list[float]] = {q.team: [] for q in quotas}
    for index in range(buckets):
        wanted = {team: series[index] for team, series in demand.items() if series[index] > 0}
        shares = water_fill(pool_gpus, wanted, guarantees, limits, weights) if wanted else {}
        for team in fair:
            fair[team].append(shares.get(team, 0.0))
    return fair


def _rounded(values: list[float]) -> list[float]:
    return [round(value, 3) for value in values]
