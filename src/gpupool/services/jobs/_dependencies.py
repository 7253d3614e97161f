"""Job dependencies: resolved at submit, settled by the control loop when jobs end.

At submit (``resolve``, ``attach``) each dependency's job, named by id or by name, is found
among the jobs of the new job's team — another team's job is answered exactly as a job that
does not exist — and the ids are what the spec records. A job with dependencies is stored
``waiting``: the scheduler's snapshot leaves it out (one indexed column), and its reason is
``Dependency`` with a message naming the job it waits for.

Each control pass that schedules first settles the waiting jobs (``loops.dependencies``):
``plan`` reads them (one query over the waiting jobs, which a partial index finds, and
their dependencies' statuses) and ``carry_out`` writes only what changed: a job whose every
condition holds goes to the queue, a job with a condition that never can hold is cancelled
(``DependencyNeverSatisfied``), and one that still waits names the next job it waits for.
Cancelling one job may settle the jobs that wait for it, so the loop plans again until
nothing changes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, case, func, insert, select, update
from sqlalchemy.orm import Session, aliased

from gpupool.domain.dependencies import (
    Condition,
    Dependency,
    Outcome,
    label,
    never_message,
    outcome,
    waiting_message,
)
from gpupool.domain.jobs import FINAL_STATUSES, JobSpec, JobStatus, Reason
from gpupool.errors import AmbiguousDependency, InvalidRequest, UnknownDependency
from gpupool.store.models import EventModel, JobDependencyModel, JobModel

FINAL = tuple(s.value for s in FINAL_STATUSES)
# compared as ``waiting == WAITING``, which SQLite writes ``waiting = 1``: the predicate of the
# partial index ix_jobs_waiting, so that it finds the waiting jobs without a scan of all
WAITING = True


@dataclass(frozen=True)
class Resolved:
    """A dependency with its job found: its id, name and status at submit."""

    job_id: int
    condition: Condition
    name: str | None
    status: str


def resolve(session: Session, team_id: int, deps: Sequence[Dependency]) -> list[Resolved]:
    """Each dependency's job among the team's jobs (by id, or the newest of its name);
    UnknownDependency for one that is not a job of the team, AmbiguousDependency for a name
    that several jobs not ended bear, InvalidRequest for the same job named twice."""
    found: list[Resolved] = []
    for dep in deps:
        row = _by_id(session, team_id, dep.job) if isinstance(dep.job, int) else None
        if isinstance(dep.job, str):
            row = _by_name(session, team_id, dep.job)
        if row is None:
            what = (
                f"job {dep.job} is not a job of this team"
                if isinstance(dep.job, int)
                else f"no job of this team is named '{dep.job}'"
            )
            raise UnknownDependency(
                f"depends_on: {what}: give the id or the name of a job of the team the job is "
                "submitted to ('gpupool ls' lists them)",
                fields=[{"field": "depends_on", "message": what}],
            )
        if any(r.job_id == row.id for r in found):
            raise InvalidRequest(
                f"depends_on names {label(row.id, row.name)} twice: name each job once, "
                "with the one condition it must meet",
                fields=[{"field": "depends_on", "message": f"job {row.id} twice"}],
            )
        found.append(Resolved(row.id, dep.condition, row.name, row.status))
    return found


def recorded(spec: JobSpec, resolved: Sequence[Resolved]) -> JobSpec:
    """``spec`` with its dependencies as the ids they resolved to (what the job records)."""
    if not resolved:
        return spec
    deps = [Dependency(job=r.job_id, condition=r.condition) for r in resolved]
    return spec.model_copy(update={"depends_on": deps})


def first_message(resolved: Sequence[Resolved]) -> str:
    """The message of a job that has just been submitted with ``resolved``."""
    first = resolved[0]
    return waiting_message(first.condition, first.job_id, first.name)


def attach(session: Session, job_ids: Iterable[int], resolved: Sequence[Resolved]) -> None:
    """Record the dependencies of the jobs ``job_ids`` (one job, or an array's tasks), which
    were inserted waiting (``waiting_values``)."""
    rows = [
        {"job_id": job_id, "depends_on_id": r.job_id, "condition": r.condition.value}
        for job_id in job_ids
        for r in resolved
    ]
    if rows:
        session.execute(insert(JobDependencyModel), rows)


def waiting_values(resolved: Sequence[Resolved]) -> dict[str, object]:
    """The columns that make a new job wait for ``resolved`` (none when there is none)."""
    if not resolved:
        return {}
    return {"waiting": True, "reason": Reason.DEPENDENCY.value, "message": first_message(resolved)}


def _by_id(session: Session, team_id: int, job_id: int) -> JobModel | None:
    job = session.get(JobModel, job_id)
    return job if job is not None and job.team_id == team_id else None


def _by_name(session: Session, team_id: int, name: str) -> JobModel | None:
    named = select(JobModel).where(JobModel.team_id == team_id, JobModel.name == name)
    open_ones = session.scalar(
        select(func.count()).select_from(
            named.where(JobModel.status.not_in(FINAL)).order_by(None).subquery()
        )
    )
    if open_ones and open_ones > 1:
        raise AmbiguousDependency(
            f"depends_on: {open_ones} jobs named '{name}' have not ended in this team: depend "
            "on one by its id ('gpupool ls' lists them)",
            fields=[{"field": "depends_on", "message": f"several jobs named '{name}'"}],
        )
    return session.scalars(named.order_by(JobModel.id.desc()).limit(1)).first()


# -- the control loop's step -------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What to do to one waiting job: ``queue`` it, ``cancel`` it, tell its new ``message``
    (it still waits), or ``forget`` that it waits (it ended meanwhile)."""

    job_id: int
    action: str
    message: str = ""


def _waiting_rows() -> Select[Any]:
    """Each waiting job (with its status and message) and each of its dependencies' jobs
    (id, name, status), by job: the waiting jobs found through the partial index."""
    waiter, dep = aliased(JobModel), aliased(JobModel)
    return (
        select(
            waiter.id,
            waiter.status,
            waiter.message,
            waiter.held,
            JobDependencyModel.condition,
            dep.id.label("dep_id"),
            dep.name.label("dep_name"),
            dep.status.label("dep_status"),
        )
        .select_from(waiter)
        .outerjoin(JobDependencyModel, JobDependencyModel.job_id == waiter.id)
        .outerjoin(dep, dep.id == JobDependencyModel.depends_on_id)
        .where(waiter.waiting == WAITING)
        .order_by(waiter.id, dep.id)
    )


WAITING_ROWS = _waiting_rows()


def plan(session: Session) -> list[Step]:
    """What the waiting jobs' dependencies call for now (a read: one query, over the waiting
    jobs only, which the partial index finds); empty when nothing changes."""
    rows = session.execute(WAITING_ROWS).all()
    by_job: dict[int, list[Any]] = defaultdict(list)
    for row in rows:
        by_job[row.id].append(row)
    steps: list[Step] = []
    for job_id, deps in by_job.items():
        if deps[0].status != JobStatus.PENDING.value:  # it ended meanwhile (cancelled)
            steps.append(Step(job_id, "forget"))
            continue
        verdict = _verdict(deps)
        if verdict is None:
            steps.append(Step(job_id, "queue", _met_message(deps)))
        elif verdict[0] is Outcome.NEVER:
            steps.append(Step(job_id, "cancel", verdict[1]))
        elif verdict[1] != deps[0].message and not deps[0].held:  # held: it says so
            steps.append(Step(job_id, "tell", verdict[1]))
    return steps


def carry_out(session: Session, steps: Sequence[Step], now: float) -> Settled:
    """Do ``steps`` (from ``plan``), each a conditional update: a job cancelled or released
    since the plan was read is left as it is."""
    queued: list[int] = []
    cancelled: list[int] = []
    for step in steps:
        if step.action == "queue" and _release(session, step.job_id, now, step.message):
            queued.append(step.job_id)
        elif step.action == "cancel" and _cancel(session, step.job_id, now, step.message):
            cancelled.append(step.job_id)
        elif step.action == "tell":
            session.execute(
                update(JobModel)
                .where(JobModel.id == step.job_id, JobModel.waiting == WAITING)
                .values(message=step.message)
            )
        elif step.action == "forget":
            session.execute(
                update(JobModel).where(JobModel.id == step.job_id).values(waiting=False)
            )
    return Settled(tuple(queued), tuple(cancelled))


@dataclass(frozen=True)
class Settled:
    """What one ``carry_out`` did: jobs sent to the queue, and jobs cancelled."""

    queued: tuple[int, ...] = ()
    cancelled: tuple[int, ...] = ()


def _verdict(deps: Sequence[Any]) -> tuple[Outcome, str] | None:
    """None: every condition holds; else NEVER with why, or WAITING with what for."""
    waits: str | None = None
    for row in deps:
        if row.dep_id is None:  # no dependency rows (or its job is gone): nothing to wait for
            continue
        condition = Condition(row.condition)
        result = outcome(condition, row.dep_status, row.dep_status in FINAL)
        if result is Outcome.NEVER:
            return Outcome.NEVER, never_message(condition, row.dep_id, row.dep_name, row.dep_status)
        if result is Outcome.WAITING and waits is None:
            waits = waiting_message(condition, row.dep_id, row.dep_name)
    return None if waits is None else (Outcome.WAITING, waits)


def _met_message(deps: Sequence[Any]) -> str:
    met = ", ".join(
        f"{label(row.dep_id, row.dep_name)} {row.dep_status}" for row in deps if row.dep_id
    )
    return f"its dependencies are met ({met}): waiting for the scheduler"


def _release(session: Session, job_id: int, now: float, message: str) -> bool:
    """Queue the job; a held one keeps saying so (services.jobs._holds) until released."""
    held = JobModel.held.is_(True)
    done = session.execute(
        update(JobModel)
        .where(JobModel.id == job_id, JobModel.waiting == WAITING, JobModel.status == "pending")
        .values(
            waiting=False,
            reason=case((held, JobModel.reason), else_=Reason.QUEUED.value),
            message=case((held, JobModel.message), else_=message),
        )
    )
    if done.rowcount:
        _event(session, job_id, now, Reason.QUEUED, message)
    return bool(done.rowcount)


def _cancel(session: Session, job_id: int, now: float, message: str) -> bool:
    reason = Reason.DEPENDENCY_NEVER_SATISFIED
    done = session.execute(
        update(JobModel)
        .where(JobModel.id == job_id, JobModel.status == JobStatus.PENDING.value)
        .values(
            waiting=False,
            status=JobStatus.CANCELLED.value,
            ended_at=now,
            reason=reason.value,
            message=message,
        )
    )
    if done.rowcount:
        _event(session, job_id, now, reason, message)
    return bool(done.rowcount)


def _event(session: Session, job_id: int, now: float, reason: Reason, message: str) -> None:
    session.execute(
        insert(EventModel),
        [{"job_id": job_id, "at": now, "reason": reason.value, "message": message}],
    )
