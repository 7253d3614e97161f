"""Job arrays: many tasks of one spec queued in one transaction, listed and cancelled as one.

Each task is a job of its own (its own status, attempts, log), with ``array_id`` and
``array_index``; the array's id is its first task's job id (Slurm's array job id). Its tasks
get ``GPUPOOL_ARRAY_ID``, ``GPUPOOL_ARRAY_INDEX`` and ``GPUPOOL_ARRAY_TASK_COUNT`` (see
``array_env``); the scheduler starts at most ``max_running`` of them at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, Integer, cast, func, insert, literal, select, update
from sqlalchemy.orm import Session

import gpupool.services.jobs._dependencies as dependencies
import gpupool.services.jobs._holds as holds
import gpupool.services.jobs._jobs as jobs
from gpupool.domain.arrays import ArraySpec, format_indexes
from gpupool.domain.jobs import FINAL_STATUSES, JobSpec, JobStatus, Reason
from gpupool.domain.views import ArrayView, JobView, SubmittedArrayView
from gpupool.errors import Conflict, InvalidArray, NotFound
from gpupool.scheduler.types import NodeCapacity
from gpupool.services import datasets
from gpupool.services.core import Principal, Reads, Submits, Tells
from gpupool.services.jobs._views import array_view, job_view
from gpupool.store.models import EventModel, JobArrayModel, JobModel, TeamModel

LIVE = tuple(status.value for status in JobStatus if status not in FINAL_STATUSES)


@dataclass(frozen=True)
class ArraySummary:
    """An array as one row: its record, its first task (name, owner, team, spec) and how
    many of its tasks are in each status."""

    array: JobArrayModel
    first: JobModel
    counts: dict[str, int]


@dataclass(frozen=True)
class SubmittedArray:
    summary: ArraySummary
    job_ids: list[int]  # in index order


# -- what the API calls (each in its own transaction; see services.jobs) ----------------------


def submit_array(
    ctx: Submits, who: Principal, spec: JobSpec, array: ArraySpec
) -> SubmittedArrayView:
    """Queue every task of ``array`` (see ``submit``) and wake the control loop."""
    capacities, now = ctx.loop.recent_nodes(), ctx.clock.now()
    limits, most = jobs.JobLimits.of(ctx.settings), ctx.settings.max_array_tasks
    with ctx.db.session() as session:
        made = submit(session, who, spec, array, capacities, now, limits, most)
        shown = SubmittedArrayView(**dict(summary_view(made.summary)), job_ids=made.job_ids)
    ctx.loop.wake()
    return shown


def list_arrays(ctx: Reads, who: Principal, where: jobs.JobFilter) -> list[ArrayView]:
    """The arrays ``who`` can see with a task matching ``where``, newest first."""
    with ctx.db.reader() as session:
        return [summary_view(found) for found in select_arrays(session, who, where)]


def show_array(ctx: Reads, who: Principal, array_id: int) -> ArrayView:
    with ctx.db.reader() as session:
        return summary_view(get(session, who, array_id))


def show_task(ctx: Tells, who: Principal, array_id: int, index: int) -> JobView:
    """The task of ``index`` of the array, as ``services.jobs`` shows a job."""
    with ctx.db.reader() as session:
        found = task(session, who, array_id, index)
        return job_view(found, ctx.clock.now(), ctx.loop.pending_reasons.get(found.id))


def cancel_array(ctx: Tells, who: Principal, array_id: int) -> ArrayView:
    """Cancel every task not ended (see ``cancel``) and wake the control loop."""
    with ctx.db.session() as session:
        shown = summary_view(cancel(session, who, array_id, ctx.clock.now()))
    ctx.loop.wake()
    return shown


def summary_view(summary: ArraySummary) -> ArrayView:
    return array_view(summary.array, summary.first, summary.counts)


# -- the steps, in a caller's transaction ------------------------------------------------------


def submit(
    session: Session,
    principal: Principal,
    spec: JobSpec,
    array: ArraySpec,
    nodes: Sequence[NodeCapacity],
    now: float,
    limits: jobs.JobLimits = jobs.JobLimits(),
    max_tasks: int = 10_000,
) -> SubmittedArray:
    """Queue every task of ``array`` at once (all or none), or refuse them as a job would
    be refused; ``max_tasks``: the server's most tasks in one array."""
    team = jobs.admit(session, principal, spec, nodes, limits)
    if len(array.tasks) > max_tasks:
        raise InvalidArray(
            f"array '{array.text}' has {len(array.tasks):,} tasks and this server takes at most "
            f"{max_tasks:,} in one array: split it into several arrays",
            fields=[{"field": "array.indexes", "message": "too many tasks"}],
        )
    resolved = dependencies.resolve(session, team.id, spec.depends_on)
    spec = dependencies.recorded(spec, resolved)
    values = jobs.job_values(principal, team, spec.model_dump(mode="json"), now)
    values |= dependencies.waiting_values(resolved)  # every task waits for them
    first, record = _first_task(session, JobModel(**values), team, array, now)
    job_ids = [first.id, *_insert_tasks(session, values, first.id, array.tasks[1:])]
    dependencies.attach(session, job_ids, resolved)
    datasets.attach_uses(session, job_ids, team.id, spec.datasets)
    message = jobs.submitted_message(principal, team) + f" as task of array {first.id}"
    _record(session, job_ids, now, Reason.SUBMITTED, message)
    if spec.hold:  # every task, released one by one (gpupool release ID)
        holds.hold_at_submission(session, job_ids, now)
    counts = {JobStatus.PENDING.value: len(job_ids)}
    return SubmittedArray(ArraySummary(record, first, counts), job_ids)


def _first_task(
    session: Session, first: JobModel, team: TeamModel, array: ArraySpec, now: float
) -> tuple[JobModel, JobArrayModel]:
    """The first task and the array's row, whose id is that task's job id."""
    first.team, first.array_index = team, array.tasks[0]
    session.add(first)
    session.flush()
    record = JobArrayModel(
        id=first.id,
        indexes=format_indexes(array.tasks),
        size=len(array.tasks),
        max_running=array.max_running,
        submitted_at=now,
    )
    session.add(record)
    session.flush()  # the array's row before its tasks point at it
    first.array_id = first.id
    session.flush()  # before the statements that follow, which do not flush the session
    return first, record


def array_env(array_id: int, index: int, size: int) -> dict[str, str]:
    """What a task sees of its array (as Slurm's SLURM_ARRAY_JOB_ID, _TASK_ID, _TASK_COUNT)."""
    return {
        "GPUPOOL_ARRAY_ID": str(array_id),
        "GPUPOOL_ARRAY_INDEX": str(index),
        "GPUPOOL_ARRAY_TASK_COUNT": str(size),
    }


def get(session: Session, principal: Principal, array_id: int) -> ArraySummary:
    """The array, or NotFound when there is none or it is of a team the caller cannot see."""
    found = summaries(session, [array_id])
    if not found or not principal.can_see_team(found[0].first.team_id):
        raise NotFound(f"no job array {array_id}: list arrays with 'gpupool ls'")
    return found[0]


def task(session: Session, principal: Principal, array_id: int, index: int) -> JobModel:
    """The task of ``index`` of the array (``12_7``), or NotFound."""
    array = get(session, principal, array_id)
    found = session.scalar(
        select(JobModel).where(JobModel.array_id == array_id, JobModel.array_index == index)
    )
    if found is None:
        raise NotFound(
            f"array {array_id} has no task {index}: its indexes are {array.array.indexes}"
        )
    return found


def select_arrays(
    session: Session, principal: Principal, where: jobs.JobFilter
) -> list[ArraySummary]:
    """The arrays with a task matching ``where`` (status, team, user), newest first."""
    query = (
        select(JobModel.array_id)
        .where(JobModel.array_id.is_not(None))
        .group_by(JobModel.array_id)
        .order_by(JobModel.array_id.desc())
        .limit(min(where.limit, jobs.MAX_LIST))
    )
    query = jobs.visible_matching(query, principal, where)
    return summaries(session, list(session.scalars(query)))


def summaries(session: Session, array_ids: Sequence[int]) -> list[ArraySummary]:
    """The arrays of ``array_ids`` that exist, in that order, with counts by status."""
    if not array_ids:
        return []
    found = session.scalars(select(JobArrayModel).where(JobArrayModel.id.in_(array_ids)))
    records = {record.id: record for record in found}
    firsts = {j.id: j for j in session.scalars(select(JobModel).where(JobModel.id.in_(records)))}
    counts: dict[int, Counter[str]] = {array_id: Counter() for array_id in records}
    rows = session.execute(
        select(JobModel.array_id, JobModel.status, func.count())
        .where(JobModel.array_id.in_(records))
        .group_by(JobModel.array_id, JobModel.status)
    )
    for array_id, status, count in rows:
        counts[array_id][status] = count
    return [
        ArraySummary(records[i], firsts[i], dict(counts[i]))
        for i in array_ids
        if i in records and i in firsts
    ]


def cancel(session: Session, principal: Principal, array_id: int, now: float) -> ArraySummary:
    """Cancel every task not ended: pending ones at once, running ones are stopped by the
    control loop (as ``jobs.cancel`` does for one job, with two bulk updates)."""
    get(session, principal, array_id)
    principal.require_member()  # a viewer sees the array (else NotFound above) but may not act
    flagged = _update_tasks(
        session,
        array_id,
        (JobModel.status.in_(LIVE), JobModel.cancel_requested_at.is_(None)),
        cancel_requested_at=now,
    )
    _record(session, flagged, now, Reason.CANCEL_REQUESTED, f"cancel requested by {principal.name}")
    message = "cancelled before it started"
    ended = _update_tasks(
        session,
        array_id,
        (JobModel.status == JobStatus.PENDING.value,),
        status=JobStatus.CANCELLED.value,
        ended_at=now,
        reason=Reason.CANCELLED.value,
        message=message,
    )
    _record(session, ended, now, Reason.CANCELLED, message)
    after = summaries(session, [array_id])[0]
    if not flagged and not after.counts.get(JobStatus.CANCELLED.value):
        raise Conflict(f"array {array_id} already ended; nothing to cancel")
    return after


# Tasks and their events are inserted by INSERT ... SELECT over one JSON list: an INSERT of many
# VALUES rows binds 16 parameters a task, which psycopg turns into SQL slowly (0.7 s for 1,000
# tasks, against 0.05 s this way; benchmarks/array_submit.py).


def _insert_tasks(
    session: Session, values: dict[str, Any], array_id: int, indexes: Sequence[int]
) -> list[int]:
    """The tasks after the first, in one statement; their job ids in index order."""
    if not indexes:
        return []
    table = JobModel.__table__
    source = _each(session, list(indexes)).table_valued("value")
    constants = [literal(value, table.c[name].type) for name, value in values.items()]
    rows = select(*constants, literal(array_id, Integer), cast(source.c.value, Integer))
    statement = (
        insert(table)
        .from_select([*values, "array_id", "array_index"], rows)
        .returning(table.c.id, table.c.array_index)
    )
    found = session.execute(statement).all()
    return [job_id for job_id, _ in sorted(found, key=lambda row: row.array_index)]


def _each(session: Session, items: list[int]):  # noqa: ANN202 - a SQL function
    """The items as rows of a column ``value`` (each database names it so), from one JSON
    parameter."""
    bound = literal(items, JSON)
    if session.get_bind().dialect.name == "postgresql":
        return func.json_array_elements_text(cast(bound, JSON))
    return func.json_each(bound)


def _update_tasks(session: Session, array_id: int, where: tuple, **values: object) -> list[int]:
    statement = (
        update(JobModel)
        .where(JobModel.array_id == array_id, *where)
        .values(**values)
        .returning(JobModel.id)
        .execution_options(synchronize_session=False)
    )
    return list(session.scalars(statement))


def _record(
    session: Session, job_ids: Sequence[int], now: float, reason: Reason, message: str
) -> None:
    """One event for each job, in one INSERT ... SELECT over the list of ids."""
    if not job_ids:
        return
    source = _each(session, list(job_ids)).table_valued("value")
    at, reason_code = literal(now, EventModel.at.type), literal(reason.value)
    rows = select(cast(source.c.value, Integer), at, reason_code, literal(message))
    columns = ["job_id", "at", "reason", "message"]
    session.execute(insert(EventModel.__table__).from_select(columns, rows))
