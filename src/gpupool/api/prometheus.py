"""``/metrics``: the pool's state in Prometheus' text format, for the pool's admins.

The app owns its registry (never prometheus_client's global one, which every app of a process
would share); one collector reads the pool at each scrape (``services.cluster``).
Prometheus scrapes it with an admin's API token as a Bearer token (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool

from gpupool.api.access import Rule, allow
from gpupool.services import cluster
from gpupool.services.core import Principal
from gpupool.services.platform import Platform

PATH = "/metrics"


class PoolCollector(Collector):
    """The pool's families, read from the platform at each scrape."""

    def __init__(self, ctx: Platform) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        state = cluster.read_pool_metrics(self.ctx)
        yield _labelled(
            GaugeMetricFamily,
            "gpupool_gpus_in_use",
            "GPUs held by the team's starting and running jobs",
            "team",
            state.gpus_in_use,
        )
        yield _labelled(
            GaugeMetricFamily,
            "gpupool_pending_jobs",
            "Jobs waiting, by why they wait (the PendingReason code)",
            "reason",
            state.pending,
        )
        yield _labelled(
            GaugeMetricFamily, "gpupool_jobs", "Jobs not ended, by status", "status", state.jobs
        )
        loop = state.loop
        yield _labelled(
            CounterMetricFamily,
            "gpupool_job_starts",
            "Attempts the control loop launched (or failed to), since the server started",
            "outcome",
            loop.starts,
        )
        yield _labelled(
            CounterMetricFamily,
            "gpupool_job_ends",
            "Attempts that ended, by their job's status then (requeued: it waits again)",
            "outcome",
            loop.ends,
        )
        cycles = HistogramMetricFamily(
            "gpupool_scheduling_cycle_seconds", "Time of one scheduling cycle (decide, dispatch)"
        )
        buckets = [(_bound(b), n) for b, n in loop.cycle_buckets] + [("+Inf", loop.cycle_count)]
        cycles.add_metric([], buckets, loop.cycle_sum)
        yield cycles


def mount(app: FastAPI, ctx: Platform) -> None:
    """The app's own registry, with the pool's collector, served at ``/metrics``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector(ctx))
    app.state.prometheus = registry
    app.include_router(router)


router = APIRouter(include_in_schema=False)


@router.get(PATH, response_class=Response)
async def scrape(request: Request, who: Annotated[Principal, allow(Rule.ADMIN)]) -> Response:
    """Every family of the app's registry, in Prometheus' text format."""
    registry: CollectorRegistry = request.app.state.prometheus
    body = await run_in_threadpool(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})


def _labelled(kind, name: str, documentation: str, label: str, values: dict) -> Metric:  # noqa: ANN001
    family = kind(name, documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([str(key)], value)
    return family


def _bound(value: float) -> str:
    return repr(float(value))
