"""Figures of a replay, each with the limit it is read against. Pure functions of the records.

* JCT (job completion time) = end − submit; queueing delay = start − submit.
* Utilisation = GPU-seconds used / (total GPUs × makespan), the makespan being the window from
  the first submit to the last end.
* Slowdown = JCT / duration (durations under one second count as one second, so that jobs of
  no length do not divide by zero). Fairness is Jain's index over the teams' mean slowdowns,
  (Σx)² / (n·Σx²): 1 when every team is slowed down alike, 1/n when one team bears it all.
  Slowdown rather than JCT, because teams with long jobs would otherwise look treated worse.
* Lower bounds: no job finishes faster than alone on the cluster, so avg JCT ≥ mean duration;
  and no cluster of G GPUs does more than G GPU-seconds of work per second, so avg JCT ≥ the
  mean completion time of shortest-remaining-work-first on one server of speed G that
  receives each job's GPU-seconds at its submit (SRPT is optimal there; Tiresias' "bound");
  no job ends before submit + duration, so the makespan is at least the span from the first
  submit to the latest such end, and utilisation ≤ offered load = GPU-seconds requested /
  (total GPUs × that span), and ≤ 1.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.sim.engine import JobRecord, SimResult, UnscheduledJob

MIN_DURATION = 1.0  # seconds: the floor under a slowdown's denominator


@dataclass(frozen=True, slots=True)
class Bounds:
    """What no policy can beat on these jobs and this cluster."""

    min_avg_jct: float  # mean isolated runtime (mean duration)
    srpt_avg_jct: float  # SRPT of the GPU-seconds on one server as fast as the cluster
    offered_load: float  # may exceed 1 when the jobs ask for more than the cluster has
    max_utilisation: float  # min(1, offered load)


@dataclass(frozen=True, slots=True)
class Metrics:
    """The figures of one replay. Times in seconds; utilisation and fairness in [0, 1]."""

    jobs: int  # jobs that ran
    unscheduled: int
    avg_jct: float
    median_jct: float
    p95_jct: float
    avg_queueing_delay: float
    p95_queueing_delay: float
    utilisation: float
    makespan: float
    preemptions: int
    preemptions_per_job: float
    jain_fairness: float
    worst_team: str
    worst_team_slowdown: float
    bounds: Bounds
    fragmentation: float | None = None  # of the unallocated GPUs, at arrivals under load


@dataclass(frozen=True, slots=True)
class TeamMetrics:
    """One team's figures in a replay. ``guarantee``: its GPUs (its virtual cluster);
    ``used``: its GPU-seconds over the makespan, as a share of its guarantee (above 1 when
    it borrowed) and of the pool."""

    team: str
    guarantee: float
    jobs: int
    unscheduled: int
    avg_jct: float
    p95_queueing_delay: float
    used_of_guarantee: float | None  # None without a guarantee
    used_of_pool: float
    preemptions: int  # of its jobs that ran


def summarize(result: SimResult) -> Metrics:
    """The metrics of a replay's result."""
    return compute_metrics(
        result.records,
        result.total_gpus,
        preemptions=result.preemptions,
        unscheduled=len(result.unscheduled),
    )


def compute_metrics(
    records: Sequence[JobRecord], total_gpus: float, *, preemptions: int = 0, unscheduled: int = 0
) -> Metrics:
    """The metrics of the jobs that ran; all zero (fairness 1) when none did."""
    jcts = [record.jct for record in records]
    delays = [record.queueing_delay for record in records]
    worst_team, worst_slowdown = worst_team_slowdown(records)
    return Metrics(
        jobs=len(records),
        unscheduled=unscheduled,
        avg_jct=mean(jcts),
        median_jct=statistics.median(jcts) if jcts else 0.0,
        p95_jct=percentile(jcts, 95),
        avg_queueing_delay=mean(delays),
        p95_queueing_delay=percentile(delays, 95),
        utilisation=utilisation(records, total_gpus),
        makespan=makespan(records),
        preemptions=preemptions,
        preemptions_per_job=preemptions / len(records) if records else 0.0,
        jain_fairness=jain_index(list(team_slowdowns(records).values())),
        worst_team=worst_team,
        worst_team_slowdown=worst_slowdown,
        bounds=bounds(records, total_gpus),
    )


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile, interpolating linearly between closest ranks (as numpy)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def gpu_seconds(records: Sequence[JobRecord]) -> float:
    return math.fsum(record.gpus * record.duration for record in records)


def makespan(records: Sequence[JobRecord]) -> float:
    """From the first submit to the last end."""
    if not records:
        return 0.0
    return max(record.end for record in records) - min(record.submit for record in records)


def utilisation(records: Sequence[JobRecord], total_gpus: float) -> float:
    """GPU-seconds used over the GPU-seconds the cluster had during the makespan."""
    window = makespan(records)
    if window <= 0 or total_gpus <= 0:
        return 0.0
    return gpu_seconds(records) / (total_gpus * window)


def slowdown(record: JobRecord) -> float:
    return max(record.jct, MIN_DURATION) / max(record.duration, MIN_DURATION)


def team_slowdowns(records: Sequence[JobRecord]) -> dict[str, float]:
    """Each team's mean slowdown, by team name."""
    by_team: dict[str, list[float]] = defaultdict(list)
    for record in records:
        by_team[record.team].append(slowdown(record))
    return {team: mean(values) for team, values in sorted(by_team.items())}


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²); 1 for no values or all zeros."""
    squares = math.fsum(value * value for value in values)
    if not values or squares == 0:
        return 1.0
    return math.fsum(values) ** 2 / (len(values) * squares)


def worst_team_slowdown(records: Sequence[JobRecord]) -> tuple[str, float]:
    """The team with the highest mean slowdown (ties: first by name), and that slowdown."""
    slowdowns = team_slowdowns(records)
    if not slowdowns:
        return "", 0.0
    return max(slowdowns.items(), key=lambda item: item[1])  # max keeps the first of ties


def bounds(records: Sequence[JobRecord], total_gpus: float) -> Bounds:
    """The lower bound of avg JCT and the upper bound of utilisation for these jobs."""
    load = offered_load(records, total_gpus)
    return Bounds(
        min_avg_jct=mean([record.duration for record in records]),
        srpt_avg_jct=srpt_avg_jct(records, total_gpus),
        offered_load=load,
        max_utilisation=min(1.0, load),
    )


def srpt_avg_jct(records: Sequence[JobRecord], total_gpus: float) -> float:
    """Mean completion time of preemptive shortest-remaining-work-first on one server doing
    ``total_gpus`` GPU-seconds per second, each job bringing its GPU-seconds at its submit."""
    if not records or total_gpus <= 0:
        return 0.0
    arrivals = sorted((record.submit, record.gpus * record.duration) for record in records)
    waiting: list[list[float]] = []  # heap of [work left, submit]
    now, total, index = 0.0, 0.0, 0
    while index < len(arrivals) or waiting:
        if not waiting:
            now = max(now, arrivals[index][0])
        while index < len(arrivals) and arrivals[index][0] <= now:
            submit, work = arrivals[index]
            heapq.heappush(waiting, [work, submit])
            index += 1
        next_arrival = arrivals[index][0] if index < len(arrivals) else math.inf
        work, submit = waiting[0]
        done = now + work / total_gpus
        if done <= next_arrival:
            heapq.heappop(waiting)
            now = done
            total += now - submit
        else:  # the smallest stays smallest while it is served
            waiting[0][0] -= (next_arrival - now) * total_gpus
            now = next_arrival
    return total / len(records)


def offered_load(records: Sequence[JobRecord], total_gpus: float) -> float:
    """GPU-seconds requested over the cluster's GPU-seconds in the shortest possible span."""
    if not records or total_gpus <= 0:
        return 0.0
    first = min(record.submit for record in records)
    span = max(record.submit + record.duration for record in records) - first
    return gpu_seconds(records) / (total_gpus * span) if span > 0 else 0.0


def team_metrics(
    result: SimResult, guarantees: dict[str, float] | None = None
) -> list[TeamMetrics]:
    """A row per team (by name) of a replay: its jobs, waits, GPU use and preemptions."""
    guarantees = guarantees or {}
    by_team: dict[str, list[JobRecord]] = defaultdict(list)
    for record in result.records:
        by_team[record.team].append(record)
    refused: dict[str, list[UnscheduledJob]] = defaultdict(list)
    for job in result.unscheduled:
        refused[job.team].append(job)
    window = makespan(result.records)
    pool = result.total_gpus * window
    rows = []
    for team in sorted(set(by_team) | set(refused)):
        records = by_team.get(team, [])
        used = gpu_seconds(records)
        guarantee = guarantees.get(team, 0.0)
        rows.append(
            TeamMetrics(
                team=team,
                guarantee=guarantee,
                jobs=len(records),
                unscheduled=len(refused.get(team, [])),
                avg_jct=mean([record.jct for record in records]),
                p95_queueing_delay=percentile([r.queueing_delay for r in records], 95),
                used_of_guarantee=used / (guarantee * window) if guarantee and window else None,
                used_of_pool=used / pool if pool > 0 else 0.0,
                preemptions=sum(record.preemptions for record in records),
            )
        )
    return rows
