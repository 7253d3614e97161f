"""Jobs' metrics: every series of a job (or some, or only what is new), and a summary."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpupool.api.access import Rule, allow
from gpupool.api.deps import MAX_ID, Id, PlatformDep
from gpupool.domain.metrics import JobMetricsView, MetricSummaryView
from gpupool.services import metrics
from gpupool.services.core import Principal

router = APIRouter(prefix="/jobs", tags=["metrics"])

Names = Annotated[
    list[str] | None,
    Query(description="only these metrics (repeat it: names=loss&names=acc)"),
]
After = Annotated[int, Query(ge=0, le=2**63 - 1, description="only points kept after this cursor")]
Attempt = Annotated[int | None, Query(ge=1, le=MAX_ID, description="only this attempt's")]
Limit = Annotated[int, Query(ge=1, le=metrics.MAX_POINTS)]


@router.get("/{job_id}/metrics", response_model=JobMetricsView)
def read_metrics(
    job_id: Id,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    names: Names = None,
    after: After = 0,
    attempt: Attempt = None,
    limit: Limit = metrics.MAX_POINTS,
) -> JobMetricsView:
    """The job's metric series per attempt (what it reported, and ``gpu.<i>.utilization`` and
    ``gpu.<i>.memory_used`` sampled by its runner). To follow a running job, ask again with
    ``after`` set to the last answer's ``cursor``: only the points kept since come back."""
    return metrics.read_metrics(ctx, who, job_id, names, after, attempt, limit)


@router.get("/{job_id}/metrics/summary", response_model=list[MetricSummaryView])
def summarize_metrics(
    job_id: Id,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    names: Names = None,
) -> list[MetricSummaryView]:
    """Each metric of the job over all its attempts: its last value, min, max and points."""
    return metrics.summarize(ctx, who, job_id, names)
