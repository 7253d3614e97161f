"""Checkpoints: a job reports one by writing into $GPUPOOL_CHECKPOINT_DIR.

The control loop looks at each running attempt's checkpoint directory at most every
``interval`` seconds (one directory read each) and stores the newest modification time as
the job's ``checkpoint_at``; the scheduler prefers to preempt jobs that lose least work. The
first new checkpoint of each attempt becomes a ``Checkpointed`` event; later ones only move
``checkpoint_at``, so that the event list stays readable for a job that saves every minute.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

import gpupool.services.jobs._jobs as job_service
from gpupool.domain.jobs import Reason
from gpupool.executors.base import Executor, Handle
from gpupool.store.models import JobModel


@dataclass(frozen=True)
class Watched:
    """A running attempt whose checkpoint directory may be looked at."""

    attempt_id: int
    job_id: int
    number: int
    handle: Handle


@dataclass(frozen=True)
class Seen:
    attempt_id: int
    job_id: int
    number: int
    at: float


class CheckpointWatcher:
    def __init__(self, executor: Executor, interval: float) -> None:
        self.executor, self.interval = executor, interval
        self._looked_at: dict[int, float] = {}  # attempt id -> monotonic time of the last look
        self._newest: dict[int, float] = {}  # attempt id -> newest mtime seen
        self._reported: set[int] = set()  # attempts that have their Checkpointed event

    def look(self, running: Iterable[Watched]) -> list[Seen]:
        """The attempts due for a look whose newest checkpoint moved (file-system reads only)."""
        clock = time.monotonic()
        seen = []
        for watched in running:
            if clock - self._looked_at.get(watched.attempt_id, -self.interval) < self.interval:
                continue
            self._looked_at[watched.attempt_id] = clock
            at = self.executor.checkpoint_at(watched.handle)
            if at is not None and at > self._newest.get(watched.attempt_id, float("-inf")):
                seen.append(Seen(watched.attempt_id, watched.job_id, watched.number, at))
        return seen

    def mark(self, seen: list[Seen]) -> None:
        """Remember what ``record`` stored, once its transaction committed (a failed commit
        leaves them to be found, and stored, again)."""
        for found in seen:
            self._newest[found.attempt_id] = found.at
            self._reported.add(found.attempt_id)

    def record(self, session: Session, seen: list[Seen], now: float) -> None:
        """Store each newer ``checkpoint_at``; the first of an attempt also gets an event."""
        for found in seen:
            moved = session.execute(
                update(JobModel)
                .where(
                    JobModel.id == found.job_id,
                    or_(JobModel.checkpoint_at.is_(None), JobModel.checkpoint_at < found.at),
                )
                .values(checkpoint_at=found.at)
            ).rowcount
            if moved and found.attempt_id not in self._reported:
                message = f"attempt {found.number} wrote a checkpoint to $GPUPOOL_CHECKPOINT_DIR"
                job_service.record(session, found.job_id, now, Reason.CHECKPOINTED, message)

    def forget(self, attempt_id: int) -> None:
        self._looked_at.pop(attempt_id, None)
        self._newest.pop(attempt_id, None)
        self._reported.discard(attempt_id)
