"""The /serve route's table and counts: round-robin over ready replicas, each tried at most
once per request, each sent its own token; latency quantiles over the latest requests."""

from __future__ import annotations

from gpupool.services.deployments import Route
from gpupool.services.deployments._routing import RoutingTable, Traffic
from gpupool.services.jobs import Endpoint


def route(*replica_ids: int) -> Route:
    replicas = tuple((i, Endpoint("127.0.0.1", 9000 + i)) for i in replica_ids)
    return Route(deployment_id=1, name="m", team_id=1, replicas=replicas)


def test_requests_take_the_ready_replicas_in_turn() -> None:
    table = RoutingTable()
    table.publish({1: route(1, 2, 3)})
    (found,) = table.named("m")
    picked = [table.pick(found, set())[0] for _ in range(6)]
    assert sorted(picked[:3]) == [1, 2, 3] and picked[:3] == picked[3:]


def test_a_request_tries_each_replica_once_then_none() -> None:
    table = RoutingTable()
    found = route(1, 2)
    tried = {table.pick(found, set())[0]}
    second = table.pick(found, tried)[0]
    assert second not in tried
    assert table.pick(found, tried | {second}) is None
    assert table.pick(route(), set()) is None


def test_the_routes_of_one_name_are_replaced_or_removed_alone() -> None:
    table = RoutingTable()
    table.publish({1: Route(1, "a", 1, route(1).replicas), 2: Route(2, "b", 1, route(2).replicas)})
    table.publish_named("a", {1: Route(1, "a", 1, key_hashes=frozenset({"h"}))})
    table.publish_named("b", {})
    (a,) = table.named("a")
    assert a.key_hashes == {"h"} and a.replicas == ()
    assert table.named("b") == ()


def test_two_teams_may_each_have_a_deployment_of_one_name() -> None:
    table = RoutingTable()
    ours, theirs = Route(1, "m", 1, team="ours"), Route(2, "m", 2, team="theirs")
    table.publish({1: ours, 2: theirs})
    assert table.named("m") == (ours, theirs)
    table.publish_named("m", {2: theirs})  # ours was stopped
    assert table.named("m") == (theirs,)


def test_each_replica_is_sent_its_own_token() -> None:
    found = Route(1, "m", 1, route(1, 2, 3).replicas, tokens={1: "one", 2: "two"})
    assert found.headers_for(1) == {"X-Gpupool-Replica-Token": "one"}
    assert found.headers_for(2) == {"X-Gpupool-Replica-Token": "two"}
    assert found.headers_for(3) == {}  # started before replicas had tokens


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
