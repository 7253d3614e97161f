"""A trace job for simulator tests."""

from __future__ import annotations

from gpupool.domain.jobs import ResourceRequest
from gpupool.sim.traces import TraceJob


def job(
    job_id: int,
    submit: float,
    duration: float,
    gpus: float | None,
    team: str = "a",
    *,
    user: str | None = None,
    types: tuple[str, ...] = (),
    censored: bool = False,
    observed_jct: float | None = None,
) -> TraceJob:
    """A job of ``team`` (its user named like the team unless told) asking for ``gpus`` (None:
    no GPU) and one CPU, on any GPU model unless ``types`` names some."""
    request = ResourceRequest(gpus=gpus)
    team_user = user or team
    return TraceJob(
        job_id, submit, duration, team, team_user, request, types, censored, observed_jct
    )
