"""Traces for the tuner's tests: seeded, small, and each with a known best setting."""

from __future__ import annotations

import random

from gpupool.sim.engine import cluster
from gpupool.sim.traces import Trace
from tests.support.traces import job

HOUR = 3600.0
DAY = 86400.0
POOL = cluster("1x4")
REPLAY = {"placement": "count", "restart_cost": 60.0}  # every tune() of these tests


def medium_heavy(days: int = 4, seed: int = 1, load: float = 0.85) -> Trace:
    """One team on 4 GPUs: 60 % of its jobs take 1-10 minutes, 40 % 0.5-0.9 GPU-hours (the
    workload of issue 27): the default's first level ends at 0.5 GPU-h, so every medium job
    is demoted just before it ends and each new short job preempts it. A first threshold
    above 0.9 GPU-h lets them end: the known better setting."""
    rng = random.Random(seed)
    mean_service = 0.6 * 330 + 0.4 * 0.7 * HOUR
    rate = load * 4 / mean_service
    jobs, now = [], 0.0
    while now < days * DAY:
        now += rng.expovariate(rate)
        short = rng.random() < 0.6
        duration = rng.uniform(60, 600) if short else rng.uniform(0.5 * HOUR, 0.9 * HOUR)
        jobs.append(job(len(jobs) + 1, round(now), round(duration), 1))
    return Trace("medium-heavy", tuple(jobs))


def light(days: int = 2, seed: int = 2) -> Trace:
    """Jobs that never meet (one every 20 minutes, none longer): every setting gives every
    job the same JCT."""
    rng = random.Random(seed)
    jobs = [job(n + 1, n * 1200.0, rng.uniform(60, 1100), 1) for n in range(days * 72)]
    return Trace("light", tuple(jobs))
