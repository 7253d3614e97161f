"""What the control loop counts for Prometheus: job starts and ends, scheduling cycle times.

The control loop owns one ``LoopStats`` and adds to it as it goes; ``/metrics`` reads a
consistent copy at scrape time (``snapshot``). Counts start at zero with each server start,
as Prometheus counters do.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# seconds: a cycle is milliseconds on a small pool, up to a second on a huge queue
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class StatsSnapshot:
    starts: dict[str, int]  # outcome (launched, launch_failed) -> attempts
    ends: dict[str, int]  # outcome (succeeded, failed, cancelled, lost, requeued) -> attempts
    cycle_buckets: list[tuple[float, int]]  # (upper bound, cycles at or below it), cumulative
    cycle_count: int
    cycle_sum: float


class LoopStats:
    """Counters and a histogram, safe to add to from the loop and read from a scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: dict[str, int] = {}
        self._ends: dict[str, int] = {}
        self._buckets = [0] * len(CYCLE_BUCKETS)
        self._count = 0
        self._sum = 0.0

    def started(self, outcome: str, count: int = 1) -> None:
        with self._lock:
            self._starts[outcome] = self._starts.get(outcome, 0) + count

    def ended(self, outcome: str) -> None:
        with self._lock:
            self._ends[outcome] = self._ends.get(outcome, 0) + 1

    def cycle(self, seconds: float) -> None:
        """One scheduling cycle took ``seconds``."""
        with self._lock:
            self._count += 1
            self._sum += seconds
            for index, bound in enumerate(CYCLE_BUCKETS):
                if seconds <= bound:
                    self._buckets[index] += 1

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(
                starts=dict(self._starts),
                ends=dict(self._ends),
                cycle_buckets=list(zip(CYCLE_BUCKETS, self._buckets, strict=True)),
                cycle_count=self._count,
                cycle_sum=self._sum,
            )
