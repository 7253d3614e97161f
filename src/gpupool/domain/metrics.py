"""Jobs' metrics as the API shows them: series of points, per metric and attempt."""

from __future__ import annotations

from pydantic import Field

from gpupool.domain.views import JobView, View

MAX_NAME = 100
NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-")
GPU_PREFIX = "gpu."  # the runner's samples of a job's GPUs


def valid_name(name: str) -> bool:
    """A metric name: 1 to 100 characters of A-Z a-z 0-9 _ . / -."""
    return 0 < len(name) <= MAX_NAME and NAME_CHARS.issuperset(name)


class MetricSeriesView(View):
    """One metric of one attempt, its points in the order they were reported (columns)."""

    name: str
    attempt: int
    steps: list[int | None] = Field(description="each point's step (null: none given)")
    times: list[float] = Field(description="each point's time, seconds since the epoch")
    values: list[float]


class JobMetricsView(View):
    job_id: int
    series: list[MetricSeriesView]
    cursor: int = Field(
        description="pass it as ?after= to get only the points kept since (live updates)"
    )
    more: bool = Field(description="more points than one answer holds: ask again with cursor")
    complete: bool = Field(
        description="the job has ended and every point of it is kept: once the pages left "
        "(more) are read, nothing more will come"
    )


class MetricSummaryView(View):
    """A metric of a job over all its attempts: its last value, min, max and points."""

    name: str
    last: float
    min: float
    max: float
    points: int


class ComparedJobView(View):
    """A job as the compare view shows it: what it is, and its metrics' final values."""

    job: JobView
    final: dict[str, float] = Field(description="each metric's last value (last attempt)")


class CompareView(View):
    jobs: list[ComparedJobView]
    missing: list[int] = Field(description="ids asked for that name no job the caller can see")
