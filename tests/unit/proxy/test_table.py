"""The proxy's one routing table: publications by kind and by key, one call to route with
each kind's rule of who may call, round robin over a route's upstreams; and the two rules
the capabilities give it (who may open a notebook, who may call a deployment)."""

from __future__ import annotations

import pytest

from gpupool.domain.endpoints import Endpoint
from gpupool.domain.jobs import Role
from gpupool.errors import AmbiguousDeployment, Forbidden, NoHealthyReplica, NotFound
from gpupool.proxy import KeyHolder, Kind, NoRoute, Route, Routes, Upstream
from gpupool.services import deployments, notebooks
from gpupool.services.core import Principal
from gpupool.services.identity import secret_hash


def upstreams(*ids: int) -> tuple[Upstream, ...]:
    return tuple(Upstream(i, Endpoint("127.0.0.1", 9000 + i), {"X-Token": f"t{i}"}) for i in ids)


def deployment(did: int, name: str, team_id: int, *replicas: int, **more: object) -> Route:
    team = more.pop("team", f"team{team_id}")
    return Route(Kind.DEPLOYMENT, name, did, team_id, team, upstreams=upstreams(*replicas), **more)


def notebook(nid: int, owner: int, team_id: int = 1) -> Route:
    return Route(Kind.NOTEBOOK, str(nid), nid, team_id, owner_id=owner, upstreams=upstreams(nid))


def who(user_id: int, *teams: int, role: Role = Role.MEMBER) -> Principal:
    return Principal(user_id, f"u{user_id}", role, frozenset(teams))


def table() -> Routes:
    return Routes(
        admit={Kind.NOTEBOOK: notebooks.admit, Kind.DEPLOYMENT: deployments.admit},
        lookup={Kind.DEPLOYMENT: deployments.published_under},
    )


def test_requests_take_a_routes_upstreams_in_turn_each_at_most_once() -> None:
    routes = table()
    found = deployment(1, "m", 1, 1, 2, 3)
    picked = [routes.pick(found, set()).id for _ in range(6)]
    assert sorted(picked[:3]) == [1, 2, 3] and picked[:3] == picked[3:]
    tried = {routes.pick(found, set()).id}
    second = routes.pick(found, tried).id
    assert second not in tried
    assert routes.pick(found, tried | {second, *{1, 2, 3}}) is None


def test_a_key_is_replaced_or_withdrawn_alone_and_kinds_stay_apart() -> None:
    routes = table()
    routes.publish(Kind.DEPLOYMENT, [deployment(1, "a", 1, 1), deployment(2, "b", 1, 2)])
    routes.publish(Kind.NOTEBOOK, [notebook(1, owner=7)])
    routes.publish_key(Kind.DEPLOYMENT, "a", [deployment(1, "a", 1, key_hashes=frozenset("h"))])
    routes.publish_key(Kind.DEPLOYMENT, "b", [])
    (a,) = routes.published(Kind.DEPLOYMENT, "a")
    assert a.key_hashes == {"h"} and a.upstreams == ()
    assert routes.published(Kind.DEPLOYMENT, "b") == ()
    assert routes.published(Kind.NOTEBOOK, "1") == (notebook(1, owner=7),)
    routes.publish(Kind.DEPLOYMENT, [])  # a whole kind replaced: the other kind stays
    assert routes.published(Kind.NOTEBOOK, "1") and not routes.published(Kind.DEPLOYMENT, "a")


def test_nothing_published_under_a_key_is_no_route() -> None:
    routes = table()
    with pytest.raises(NoRoute):
        routes.route(Kind.NOTEBOOK, "1", who(7, 1))
    with pytest.raises(NoRoute):
        routes.route(Kind.DEPLOYMENT, "m@team1", who(7, 1))


def test_a_notebook_opens_for_its_owner_alone_while_in_its_team() -> None:
    routes = table()
    routes.publish(Kind.NOTEBOOK, [notebook(1, owner=7, team_id=1)])
    assert routes.route(Kind.NOTEBOOK, "1", who(7, 1)).id == 1
    for other in (who(8, 1), who(9, 1, role=Role.ADMIN), who(7)):  # teammate, admin, left
        with pytest.raises(NotFound, match="only its owner"):
            routes.route(Kind.NOTEBOOK, "1", other)
    with pytest.raises(NotFound):
        routes.route(Kind.NOTEBOOK, "1", KeyHolder(secret_hash("gpd_anything")))


def test_a_deployment_answers_its_team_and_its_keys_and_tells_others_nothing() -> None:
    routes = table()
    hashed = secret_hash("gpd_secret")
    routes.publish(Kind.DEPLOYMENT, [deployment(1, "m", 1, 1, key_hashes=frozenset({hashed}))])
    assert routes.route(Kind.DEPLOYMENT, "m", who(7, 1)).id == 1
    assert routes.route(Kind.DEPLOYMENT, "m", who(9, role=Role.ADMIN)).id == 1
    assert routes.route(Kind.DEPLOYMENT, "m@team1", KeyHolder(hashed)).id == 1
    with pytest.raises(Forbidden, match="viewers"):
        routes.route(Kind.DEPLOYMENT, "m", who(8, 1, role=Role.VIEWER))
    for stranger in (who(8, 2), KeyHolder(secret_hash("gpd_other"))):
        with pytest.raises(NotFound, match="no deployment m that you may call"):
            routes.route(Kind.DEPLOYMENT, "m", stranger)
    with pytest.raises(NotFound):  # the key of another team's address
        routes.route(Kind.DEPLOYMENT, "m@team2", KeyHolder(hashed))


def test_two_teams_may_each_have_a_deployment_of_one_name() -> None:
    routes = table()
    ours, theirs = deployment(1, "m", 1, 1), deployment(2, "m", 2, 2)
    routes.publish(Kind.DEPLOYMENT, [theirs, ours])
    assert routes.published(Kind.DEPLOYMENT, "m") == (ours, theirs)
    assert routes.route(Kind.DEPLOYMENT, "m", who(7, 1)) == ours
    assert routes.route(Kind.DEPLOYMENT, "m", who(8, 2)) == theirs
    with pytest.raises(AmbiguousDeployment) as raised:
        routes.route(Kind.DEPLOYMENT, "m", who(9, 1, 2))
    assert len(raised.value.details["addresses"]) == 2
    assert routes.route(Kind.DEPLOYMENT, "m@team2", who(9, 1, 2)) == theirs


def test_a_deployment_without_a_ready_replica_is_unavailable_to_its_callers_only() -> None:
    routes = table()
    routes.publish(Kind.DEPLOYMENT, [deployment(1, "m", 1)])
    with pytest.raises(NoHealthyReplica):
        routes.route(Kind.DEPLOYMENT, "m", who(7, 1))
    with pytest.raises(NotFound):
        routes.route(Kind.DEPLOYMENT, "m", who(8, 2))
