"""Reconcile: what the executor observes of every active attempt, recorded.

Load: the active attempts (in memory) and one ``poll_all`` of the executor, outside any
transaction. Apply: every attempt whose state changed, in one transaction, by the jobs
capability's rules (``services.jobs.apply_transition``). The rows it needs are read with one
Core statement per table into plain records, the rules change the records, and what they
changed is written back with one statement per table and set of columns (the common case:
a start, an exit). An attempt lost or fenced, rarer, is applied to ORM rows, since its rules
count the job's earlier lost attempts in the database. Only once the transaction commits are
the attempts marked as observed, so a pass that fails (a full disk) is redone by the next.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, Select, Table, Update, bindparam, select
from sqlalchemy.orm import Session, lazyload

from gpupool.domain.jobs import JobStatus
from gpupool.executors.base import Executor
from gpupool.executors.task import Observed, PollResult
from gpupool.loops.active import ActiveAttempt, ActiveAttempts
from gpupool.scheduler.types import Clock
from gpupool.services import jobs as job_service
from gpupool.services.core import LoopStats
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel, JobModel

ENDED = (Observed.EXITED, Observed.LOST)
# what the rules apply to plain records; the others go through the ORM
PLAIN = (Observed.RUNNING, Observed.EXITED, Observed.STARTING)

ATTEMPTS: Table = AttemptModel.__table__
JOBS: Table = JobModel.__table__
# the columns the rules of a start or an exit read or write
ATTEMPT_COLUMNS = ("id", "job_id", "number", "node", "status", "started_at", "ended_at")
ATTEMPT_COLUMNS += ("exit_code", "stop_reason")
JOB_COLUMNS = ("id", "spec", "status", "gpus", "started_at", "ended_at", "exit_code", "reason")
JOB_COLUMNS += ("message", "cancel_requested_at", "node", "placement", "attained", "queued_at")
JOB_COLUMNS += ("preemptions",)
# built once: by id, the columns above (an attempt's also says whether its launch is recorded)
READ_ATTEMPTS = select(
    *(ATTEMPTS.c[name] for name in ATTEMPT_COLUMNS),
    ATTEMPTS.c.executor_state.is_(None).label("stateless"),
).where(ATTEMPTS.c.id.in_(bindparam("ids", expanding=True)))
READ_JOBS = select(*(JOBS.c[name] for name in JOB_COLUMNS)).where(
    JOBS.c.id.in_(bindparam("ids", expanding=True))
)


class Record:
    """A row's columns as attributes, and the ones set since it was read (``changed``)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)
        self.__dict__["changed"] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value
        self.changed[name] = value


class Reconcile:
    """Polls every active attempt and records all that changed in one transaction."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        executor: Executor,
        actives: ActiveAttempts,
        stats: LoopStats,
    ) -> None:
        self.db, self.clock, self.executor = db, clock, executor
        self.actives, self.stats = actives, stats

    def run(self) -> bool:
        """One pass; True if some attempt changed state."""
        actives = list(self.actives)
        seen = zip(actives, self.executor.poll_all([a.handle for a in actives]), strict=True)
        changed = [(a, result) for a, result in seen if _changed(a, result)]
        if not changed:
            return False
        now = self.clock.now()
        with self.db.session() as session:
            applied = self._apply(session, changed, now)
        for active, result in changed:  # committed: only now is it observed
            started, job_status = applied[active.attempt_id]
            active.observed, active.started_at = result.observed, started
            active.progress = result.message if result.observed == Observed.STARTING else None
            if result.observed in ENDED:
                self.actives.forget(active)
                self.stats.ended(outcome(job_status))
        return True

    def _apply(
        self, session: Session, changed: list[tuple[ActiveAttempt, PollResult]], now: float
    ) -> dict[int, tuple[float | None, str]]:
        """Record each change; attempt id -> its start time and its job's status after."""
        jobs_seen = Counter(active.job_id for active, _ in changed)
        plain = [(a, r) for a, r in changed if r.observed in PLAIN and jobs_seen[a.job_id] == 1]
        plain_ids = {active.attempt_id for active, _ in plain}
        rare = [(a, r) for a, r in changed if a.attempt_id not in plain_ids]
        applied = self._apply_plain(session, plain, now) if plain else {}
        if rare:
            applied |= self._apply_rows(session, rare, now)
        return applied

    def _apply_plain(
        self, session: Session, changed: list[tuple[ActiveAttempt, PollResult]], now: float
    ) -> dict[int, tuple[float | None, str]]:
        core = session.connection()  # Core statements: no ORM objects for these rows
        attempts = _records(core, READ_ATTEMPTS, [a.attempt_id for a, _ in changed])
        jobs = _records(core, READ_JOBS, [a.job_id for a, _ in changed])
        applied = {}
        for active, result in changed:
            attempt, job = attempts[active.attempt_id], jobs[active.job_id]
            if attempt.stateless:  # the launch, recorded with the attempt's first change
                attempt.executor_state = self.executor.get_state(active.handle)
            job_service.apply_transition(session, attempt, job, result, now)
            applied[active.attempt_id] = (attempt.started_at, job.status)
        _write(core, ATTEMPTS, attempts.values())
        _write(core, JOBS, jobs.values())
        return applied

    def _apply_rows(
        self, session: Session, changed: list[tuple[ActiveAttempt, PollResult]], now: float
    ) -> dict[int, tuple[float | None, str]]:
        bare = lazyload("*")  # the rows alone: not the job's user and team
        attempt_ids = [active.attempt_id for active, _ in changed]
        attempts = {
            a.id: a
            for a in session.scalars(
                select(AttemptModel).where(AttemptModel.id.in_(attempt_ids)).options(bare)
            )
        }
        job_ids = [active.job_id for active, _ in changed]
        jobs = {
            j.id: j
            for j in session.scalars(select(JobModel).where(JobModel.id.in_(job_ids)).options(bare))
        }
        applied = {}
        for active, result in changed:
            attempt, job = attempts[active.attempt_id], jobs[active.job_id]
            if attempt.executor_state is None:
                attempt.executor_state = self.executor.get_state(active.handle)
            job_service.apply_transition(session, attempt, job, result, now)
            applied[active.attempt_id] = (attempt.started_at, job.status)
        session.flush()  # the ORM rows' status before the next pass reads them
        return applied


def _changed(active: ActiveAttempt, result: PollResult) -> bool:
    """Whether a poll saw something to record: a new state, or new progress of a start."""
    if result.observed != active.observed:
        return True
    return result.observed == Observed.STARTING and result.message != active.progress


def _records(core: Connection, query: Select, ids: list[int]) -> dict[int, Record]:
    return {row["id"]: Record(row) for row in core.execute(query, {"ids": ids}).mappings()}


def _write(core: Connection, table: Table, records: Iterable[Record]) -> None:
    """What the rules changed, by primary key: one statement per set of columns changed."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for record in records:
        if record.changed:
            names = tuple(sorted(record.changed))
            values = {f"new_{name}": value for name, value in record.changed.items()}
            groups.setdefault(names, []).append({"_id": record.id, **values})
    for names, rows in groups.items():
        core.execute(_update(table, names), rows)


@functools.cache
def _update(table: Table, names: tuple[str, ...]) -> Update:
    """``UPDATE table SET names WHERE id``, built once per table and set of columns (a
    start, an exit, a requeue: a handful)."""
    return (
        table.update()
        .where(table.c.id == bindparam("_id"))
        .values({name: bindparam(f"new_{name}", type_=table.c[name].type) for name in names})
    )


def outcome(job_status: str) -> str:
    """How an attempt ended, for /metrics: its job's status, or ``requeued``."""
    final = JobStatus(job_status).is_final
    return job_status if final else "requeued"
