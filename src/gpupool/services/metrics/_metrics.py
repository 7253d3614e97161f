"""Jobs' metrics: the points a job reported and its runner sampled, per attempt.

A point is a name, an optional step, a time and a value. Names that start with ``gpu.`` are
the runner's samples of the job's GPUs (``gpu.<index>.utilization`` in %,
``gpu.<index>.memory_used`` in bytes); a job cannot report such names itself (its runner
refuses them), so they can be trusted to say whether the job used its GPUs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobStatus
from gpupool.domain.metrics import (
    GPU_PREFIX,
    ComparedJobView,
    CompareView,
    JobMetricsView,
    MetricSeriesView,
    MetricSummaryView,
    valid_name,
)
from gpupool.errors import InvalidRequest, NotFound
from gpupool.services import jobs
from gpupool.services.core import Principal, Reads, Tells
from gpupool.services.jobs import job_view
from gpupool.store.models import AttemptModel, JobMetricModel, MetricCursorModel

UTILIZATION_SUFFIX = ".utilization"
MAX_POINTS = 50_000  # in one answer of the API
MAX_NAMES = 50  # asked for in one request
MAX_COMPARED = 8  # jobs in one compare view


def gpu_busy(session: Session, job_id: int, since: float) -> bool | None:
    """Whether the job kept any of its GPUs busy at or after ``since``: True when a
    ``gpu.*.utilization`` sample taken then is above 0, False when the job has such samples
    and none taken then is above 0, None when it has no GPU samples at all (GPUs declared
    in the config rather than seen by NVML report no utilisation)."""
    utilization = and_(JobMetricModel.job_id == job_id, _is_gpu_utilization())
    first = session.scalars(select(JobMetricModel.id).where(utilization).limit(1)).first()
    if first is None:
        return None
    busy = utilization & (JobMetricModel.at >= since) & (JobMetricModel.value > 0)
    return session.scalars(select(JobMetricModel.id).where(busy).limit(1)).first() is not None


def final_values(session: Session, job_id: int) -> dict[str, float]:
    """Each metric's last value (the point of the highest step, then the latest) in the
    job's last attempt that reported any; GPU samples are left out. Empty when the job
    reported nothing."""
    reported = (JobMetricModel.job_id == job_id) & ~_is_gpu()
    last = session.scalar(select(func.max(JobMetricModel.attempt)).where(reported))
    if last is None:
        return {}
    return _latest(session, reported & (JobMetricModel.attempt == last))


def _latest(
    session: Session, where: ColumnElement[bool], first: list[Any] | None = None
) -> dict[str, float]:
    """Each name's last value among the points ``where`` picks: the highest step, then the
    latest (after the ``first`` orderings, e.g. the latest attempt)."""
    order = (
        *(first or []),
        JobMetricModel.step.desc().nulls_last(),
        JobMetricModel.at.desc(),
        JobMetricModel.id.desc(),
    )
    rank = func.row_number().over(partition_by=JobMetricModel.name, order_by=order)
    ranked = (
        select(JobMetricModel.name, JobMetricModel.value, rank.label("rank"))
        .where(where)
        .subquery()
    )
    rows = session.execute(select(ranked.c.name, ranked.c.value).where(ranked.c.rank == 1))
    return {name: value for name, value in rows}


def _is_gpu() -> ColumnElement[bool]:
    """Names in the ``gpu.`` range (a range, so the name index serves it)."""
    return (JobMetricModel.name >= GPU_PREFIX) & (JobMetricModel.name < "gpu/")


def _is_gpu_utilization() -> ColumnElement[bool]:
    return _is_gpu() & JobMetricModel.name.endswith(UTILIZATION_SUFFIX)


# -- what the API reads ------------------------------------------------------------------------


def read_metrics(
    ctx: Reads,
    who: Principal,
    job_id: int,
    names: list[str] | None = None,
    after: int = 0,
    attempt: int | None = None,
    limit: int = MAX_POINTS,
) -> JobMetricsView:
    """The job's points kept after ``after`` (a ``cursor`` of an earlier answer), of the
    ``names`` asked for (default: all) and the ``attempt`` (default: all), at most ``limit``."""
    _check_names(names)
    with ctx.db.reader() as session:
        job = jobs.get_job(session, who, job_id)
        rows = _points(session, job_id, names, after, attempt, limit + 1)
        complete = JobStatus(job.status).is_final and _all_read(session, job_id)
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = rows[-1].id if rows else after
    return JobMetricsView(
        job_id=job_id,
        series=_series(rows),
        cursor=cursor,
        more=more,
        complete=complete,
    )


def summarize(
    ctx: Reads, who: Principal, job_id: int, names: list[str] | None = None
) -> list[MetricSummaryView]:
    """Each metric of the job (over all its attempts): its last value (the latest attempt's,
    by step then time), min, max and points; counted by the database, not read out."""
    _check_names(names)
    of_job = JobMetricModel.job_id == job_id
    if names:
        of_job = of_job & JobMetricModel.name.in_(names)
    with ctx.db.reader() as session:
        jobs.get_job(session, who, job_id)
        totals = session.execute(
            select(
                JobMetricModel.name,
                func.min(JobMetricModel.value),
                func.max(JobMetricModel.value),
                func.count(),
            )
            .where(of_job)
            .group_by(JobMetricModel.name)
        )
        last = _latest(session, of_job, [JobMetricModel.attempt.desc()])
        return [
            MetricSummaryView(name=name, last=last[name], min=low, max=high, points=count)
            for name, low, high, count in sorted(totals)
        ]


def compare(ctx: Tells, who: Principal, job_ids: list[int]) -> CompareView:
    """Jobs side by side with their metrics' final values; ids of jobs the caller cannot
    see (or that do not exist) are listed as missing, with nothing of them shown."""
    if len(job_ids) > MAX_COMPARED:
        raise InvalidRequest(f"compare at most {MAX_COMPARED} jobs at once", field="ids")
    shown, missing = [], []
    with ctx.db.reader() as session:
        for job_id in dict.fromkeys(job_ids):
            try:
                job = jobs.get_job(session, who, job_id)
            except NotFound:
                missing.append(job_id)
                continue
            view = job_view(job, ctx.clock.now(), ctx.loop.pending_reasons.get(job_id))
            shown.append(ComparedJobView(job=view, final=final_values(session, job_id)))
    return CompareView(jobs=shown, missing=missing)


def _check_names(names: list[str] | None) -> None:
    if names is not None and len(names) > MAX_NAMES:
        raise InvalidRequest(f"ask for at most {MAX_NAMES} metrics at once", field="names")
    for name in names or []:
        if not valid_name(name):
            raise InvalidRequest(f"no metric can be named {name[:120]!r}", field="names")


def _points(
    session: Session,
    job_id: int,
    names: list[str] | None,
    after: int,
    attempt: int | None,
    limit: int,
) -> list[JobMetricModel]:
    query = select(JobMetricModel).where(JobMetricModel.job_id == job_id, JobMetricModel.id > after)
    if names:
        query = query.where(JobMetricModel.name.in_(names))
    if attempt is not None:
        query = query.where(JobMetricModel.attempt == attempt)
    return list(session.scalars(query.order_by(JobMetricModel.id).limit(limit)))


def _all_read(session: Session, job_id: int) -> bool:
    """Whether every launched attempt of the job has been read to its end."""
    launched = select(func.count()).where(
        AttemptModel.job_id == job_id, AttemptModel.executor_state.is_not(None)
    )
    done = select(func.count()).where(
        MetricCursorModel.job_id == job_id, MetricCursorModel.done.is_(True)
    )
    return session.scalar(done) >= session.scalar(launched)


def _series(rows: list[JobMetricModel]) -> list[MetricSeriesView]:
    grouped: dict[tuple[int, str], list[JobMetricModel]] = {}
    for row in rows:
        grouped.setdefault((row.attempt, row.name), []).append(row)
    return [
        MetricSeriesView(
            name=name,
            attempt=attempt,
            steps=[r.step for r in points],
            times=[r.at for r in points],
            values=[r.value for r in points],
        )
        for (attempt, name), points in sorted(grouped.items())
    ]
