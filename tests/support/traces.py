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
) -> TraceJob:
    """A job of ``team`` (its user named like the team unless told) asking for ``gpus`` (None:
    no GPU) and one CPU, on any GPU model unless ``types`` names some."""
    request = ResourceRequest(gpus=gpus)
    return TraceJob(job_id, submit, duration, team, user or team, request, types)
