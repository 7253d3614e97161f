"""Schedule: a snapshot, the pure scheduler's decisions, and why the others wait.

Load: an immutable snapshot of the queue, the nodes and the running work, in one read
transaction. Decide: the pure scheduler (``gpupool.scheduler.schedule``), outside any
transaction; what it decides is carried out in parts as it goes (``Policy.max_starts`` jobs
at a time), by the stops pipeline (preemptions) and the launch pipeline (placements).
Apply: each pending job's reason, only where it changed, in one transaction of two bulk
statements; it explains the jobs left pending when ``explain_interval`` seconds have passed
since the last cycle that did.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from sqlalchemy import bindparam, insert, select

from gpupool.domain.isolation import IsolationStatus
from gpupool.domain.jobs import JobStatus, Reason
from gpupool.domain.waiting import PendingReason
from gpupool.loops.envbuilds import BuildsFirst
from gpupool.scheduler.state import Schedule, SchedulerState
from gpupool.scheduler.types import (
    Clock,
    Decisions,
    Nomination,
    PendingJob,
    Placement,
    Preemption,
)
from gpupool.services.scheduling import SnapshotBuilder
from gpupool.store.db import Database
from gpupool.store.models import EventModel, JobModel


class Scheduling:
    """One scheduling cycle per ``run``; ``pending_reasons`` and ``nominations`` are what the
    latest cycle left (read by the API through the loop's face, and by the next cycle)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        snapshots: SnapshotBuilder,
        decide: Schedule,
        isolation: Callable[[], IsolationStatus | None],
        preempt: Callable[[list[Preemption]], None],
        launch: Callable[[list[Placement]], None],
        explain_interval: float,
        builds: BuildsFirst | None = None,
    ) -> None:
        self.db, self.clock, self.snapshots, self.decide = db, clock, snapshots, decide
        self.isolation, self.preempt, self.launch = isolation, preempt, launch
        self.builds = builds  # GPU jobs whose environment is not built wait for its build
        self.explain_interval = explain_interval
        self.state = SchedulerState()  # what the loop's cycles keep, one to the next
        self.pending_reasons: dict[int, PendingReason] = {}
        # the GPUs each preempting job's victims are freeing for it, from the last cycle to the
        # next (the scheduler keeps them for it and drops them when it starts or cannot use
        # them). Kept in memory only: a restart loses them, which is acceptable — the victims
        # still stop and are requeued, and at worst a job preempts once more after a restart.
        self.nominations: dict[int, Nomination] = {}
        self._last_codes: dict[int, tuple[str, str]] = {}
        self._explained_at = -math.inf  # when a cycle last explained the jobs left pending

    def run(self) -> None:
        with self.db.reader() as session:
            snapshot = self.snapshots.build(session, self.clock.now(), self.nominations)
        isolation = self.isolation()
        if isolation is not None and not isolation.runs_jobs:
            self._hold(snapshot.pending, isolation)
            return
        due = time.monotonic() - self._explained_at >= self.explain_interval
        if not due:
            snapshot = replace(snapshot, explain=False)
        decisions = self.decide(snapshot, self.clock, self.state, self.carry_out)
        self.nominations = dict(decisions.nominations)
        if due:
            self._explained_at = time.monotonic()
            self.pending_reasons = decisions.pending
            self._record_reasons(decisions.pending)
        self.carry_out(decisions)

    def carry_out(self, decisions: Decisions) -> None:
        """Stop the preempted jobs and start the placed ones (all or part of a cycle's)."""
        if decisions.preemptions:
            self.preempt(decisions.preemptions)
        if decisions.placements:
            placements = decisions.placements
            self.snapshots.placed(placements)
            if self.builds is not None:
                placements = self.builds.divert(placements)
            self.launch(placements)

    def _hold(self, pending: Iterable[PendingJob], isolation: IsolationStatus) -> None:
        """Isolation is on and cannot be had: no job starts, and each says why."""
        reasons = {
            job.job_id: PendingReason(
                job.job_id, Reason.ISOLATION_UNAVAILABLE, isolation.message, position
            )
            for position, job in enumerate(pending, start=1)
        }
        self.pending_reasons = reasons
        self._record_reasons(reasons)

    def _record_reasons(self, reasons: dict[int, PendingReason]) -> None:
        """Write a pending job's reason only when it changes (positions stay in memory)."""
        changed = {
            job_id: r
            for job_id, r in reasons.items()
            if self._last_codes.get(job_id) != (r.code.value, r.message)
        }
        for job_id in self._last_codes.keys() - reasons.keys():
            del self._last_codes[job_id]
        if not changed:
            return
        with self.db.session() as session:
            # locked until this commits, so that a cancel committed meanwhile (PostgreSQL:
            # each statement sees what others committed) cannot be given a pending reason;
            # a job a cancel holds now is skipped, and keeps the cancel's reason
            query = select(JobModel.id).where(
                JobModel.id.in_(changed),
                JobModel.status == JobStatus.PENDING.value,
                JobModel.held.is_(False),  # held since the snapshot: it keeps its reason Held
            )
            still = set(session.scalars(query.with_for_update(skip_locked=True)))
            self._write_reasons(session, {k: v for k, v in changed.items() if k in still})
        for job_id, reason in changed.items():
            self._last_codes[job_id] = (reason.code.value, reason.message)

    def _write_reasons(self, session, reasons: dict[int, PendingReason]) -> None:  # noqa: ANN001
        if not reasons:
            return
        jobs = JobModel.__table__
        session.execute(
            jobs.update()
            .where(jobs.c.id == bindparam("job"))
            .values(reason=bindparam("code"), message=bindparam("text")),
            [{"job": k, "code": r.code.value, "text": r.message} for k, r in reasons.items()],
        )
        now = self.clock.now()
        new_codes = [
            {"job_id": k, "at": now, "reason": r.code.value, "message": r.message}
            for k, r in reasons.items()
            if self._last_codes.get(k, ("",))[0] != r.code.value
        ]
        if new_codes:
            session.execute(insert(EventModel), new_codes)
