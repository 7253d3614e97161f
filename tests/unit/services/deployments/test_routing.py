"""/serve's counts: requests, errors and latency quantiles over the latest requests, per
deployment and per replica (the routes are the proxy's table's: tests/unit/proxy)."""

from __future__ import annotations

from gpupool.services.deployments._routing import Traffic


def test_traffic_counts_requests_errors_and_latency_per_deployment_and_replica() -> None:
    traffic = Traffic()
    for ms in range(1, 101):
        traffic.record(1, 7, ms / 1000, failed=ms == 100)
    traffic.record(1, None, 0.5, failed=True)  # no replica reached
    seen = traffic.of_deployment(1)
    assert (seen.requests, seen.errors) == (101, 2)
    assert seen.p50_ms == 51.0 and seen.p99_ms == 100.0
    replica = traffic.of_replica(7)
    assert (replica.requests, replica.errors, replica.p50_ms) == (100, 1, 51.0)
    assert traffic.of_replica(8).requests == 0 and traffic.of_deployment(2).p50_ms is None
