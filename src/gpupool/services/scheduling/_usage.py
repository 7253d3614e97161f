"""Decayed past GPU usage per user, the input of fair share inside a team.

An attempt that held ``g`` GPUs from ``s`` to ``e`` (``e`` = now while it runs) counts
``∫ g·2^(-(now-t)/H) dt`` over [s, e] = ``g·H/ln2·(2^(-(now-e)/H) − 2^(-(now-s)/H))``
GPU-seconds, H being the half-life (Slurm's PriorityDecayHalfLife). Attempts that ended more
than ``HORIZON_HALF_LIVES`` half-lives ago weigh less than a millionth and are not read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from types import MappingProxyType

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpupool.store.models import AttemptModel, JobModel, UserModel

HORIZON_HALF_LIVES = 20


def decayed_gpu_seconds(
    gpus: float, start: float, end: float, now: float, half_life: float
) -> float:
    """The decayed GPU-seconds of holding ``gpus`` from ``start`` to ``end``, seen at ``now``."""
    end = min(end, now)
    start = min(start, end)
    rate = math.log(2) / half_life
    # 2^-a − 2^-b written as 2^-a·(1 − 2^-(b−a)), with expm1: exact for short attempts too
    return gpus / rate * 2 ** (-(now - end) / half_life) * -math.expm1(-(end - start) * rate)


class UsageTracker:
    """User name -> decayed GPU-seconds, recomputed at most every ``refresh_seconds``.

    Usage moves slowly (a half-life is days), so a value a few seconds old is as good as a
    fresh one, and the snapshot, built many times a second, stays cheap.
    """

    def __init__(self, half_life: float, refresh_seconds: float = 5.0) -> None:
        self.half_life, self.refresh_seconds = half_life, refresh_seconds
        self._usage: Mapping[str, float] = MappingProxyType({})
        self._checked_at: float | None = None

    def set_half_life(self, half_life: float) -> None:
        """Decay by ``half_life`` from the next read on (computed again at once if it changed)."""
        if half_life != self.half_life:
            self.half_life, self._checked_at = half_life, None

    def current(self, session: Session, now: float) -> Mapping[str, float]:
        checked = time.monotonic()
        if self._checked_at is None or checked - self._checked_at >= self.refresh_seconds:
            self._usage = MappingProxyType(self.compute(session, now))
            self._checked_at = checked
        return self._usage

    def compute(self, session: Session, now: float) -> dict[str, float]:
        horizon = now - HORIZON_HALF_LIVES * self.half_life
        rows = session.execute(
            select(UserModel.name, JobModel.gpus, AttemptModel.started_at, AttemptModel.ended_at)
            .join(JobModel, JobModel.id == AttemptModel.job_id)
            .join(UserModel, UserModel.id == JobModel.user_id)
            .where(
                AttemptModel.started_at.is_not(None),
                or_(AttemptModel.ended_at.is_(None), AttemptModel.ended_at > horizon),
                JobModel.gpus > 0,
            )
        )
        usage: dict[str, float] = {}
        for user, gpus, started, ended in rows:
            held = decayed_gpu_seconds(gpus, started, ended or now, now, self.half_life)
            usage[user] = usage.get(user, 0.0) + held
        return usage
