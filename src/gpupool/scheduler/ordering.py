"""Phase 2: the order in which pending jobs are tried (the policy a later issue replaces).

One queue per team, each by priority (higher first), then submit time, then job id; the
teams (in name order) are served round-robin, each queue's head in turn. A job's position
is its 1-based place in its own team's queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.scheduler.types import PendingJob


@dataclass(slots=True)
class QueuedJob:
    job: PendingJob
    position: int  # 1-based, in its team's queue


def order_pending(pending: Iterable[PendingJob], now: float) -> list[QueuedJob]:
    """The jobs in the order to try them. ``now`` is for policies that age or decay."""
    return round_robin(team_queues(pending))


def queue_key(job: PendingJob) -> tuple[int, float, int]:
    return (-job.priority, job.submitted_at, job.job_id)


def team_queues(pending: Iterable[PendingJob]) -> dict[str, list[PendingJob]]:
    queues: dict[str, list[PendingJob]] = {}
    for job in pending:
        queues.setdefault(job.team, []).append(job)
    for queue in queues.values():
        queue.sort(key=queue_key)
    return queues


def round_robin(queues: dict[str, list[PendingJob]]) -> list[QueuedJob]:
    active = [queues[team] for team in sorted(queues)]
    ordered: list[QueuedJob] = []
    depth = 0
    while active:
        ordered.extend(QueuedJob(queue[depth], depth + 1) for queue in active)
        depth += 1
        active = [queue for queue in active if len(queue) > depth]
    return ordered
