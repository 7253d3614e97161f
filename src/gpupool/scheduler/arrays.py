"""The limit of a job array (sbatch's ``%N``): at most N of its tasks hold resources at once.

A task counts from the moment a cycle places it (or preempts for it) until its attempt has
ended: starting, running and stopping tasks all count, so that a limit of 2 never sees a
third task start while one of two is still being stopped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gpupool.scheduler.types import Allocation, PendingJob


class ArrayLimits:
    """The tasks of each limited array that hold resources, kept current during one cycle.

    Only arrays with a limited task pending are counted: an array without a limit, or with
    nothing left to start, costs nothing.
    """

    def __init__(self, allocations: Iterable[Allocation], pending: Iterable[PendingJob]) -> None:
        limited = {job.array_id for job in pending if job.array_limit is not None}
        limited.discard(None)
        self.holding: Counter[int] = Counter()
        if limited:
            # a gang task holds one allocation per task: each job counts once
            jobs = {(a.array_id, a.job_id) for a in allocations if a.array_id in limited}
            self.holding.update(array_id for array_id, _ in jobs)

    def fits(self, job: PendingJob) -> bool:
        """Whether one more task of ``job``'s array may start."""
        if job.array_id is None or job.array_limit is None:
            return True
        return self.holding[job.array_id] < job.array_limit

    def start(self, job: PendingJob) -> None:
        """``job`` was placed, or preempted others to start: it counts from now on."""
        if job.array_id is not None and job.array_limit is not None:
            self.holding[job.array_id] += 1
