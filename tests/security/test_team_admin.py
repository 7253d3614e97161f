"""A team admin's reach ends at its team: it changes the members (and team admins) of its own
team, and nothing of other teams, of quotas, of users or of the pool; losing the role takes
effect at once, even for a token it used a moment before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.executors.fake import NeverStartsExecutor
from tests.support.platform import create_user, make_settings, refused, running_app

API = "/api/v1"


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[TestClient]:
    """The pool admin's client, with teams a (ann is its team admin), b (ann is not in it)
    and c (ann is a plain member), and a user bob of the default team."""
    with running_app(make_settings(tmp_path / "data"), NeverStartsExecutor()) as (client, _):
        for team in ("a", "b", "c"):
            assert client.post(f"{API}/teams", json={"name": team}).status_code == 201
        create_user(client, "ann", teams=["a", "c"])
        create_user(client, "bob")
        made = client.put(f"{API}/teams/a/members/ann", json={"admin": True})
        assert made.json()["admin_of"] == ["a"], made.text
        yield client


@pytest.fixture
def ann(admin: TestClient) -> dict[str, str]:
    created = admin.post(f"{API}/tokens", json={"name": "t", "user": "ann"})
    return {"Authorization": f"Bearer {created.json()['token']}"}


def test_a_team_admin_cannot_join_or_change_a_team_it_is_not_in(
    admin: TestClient, ann: dict[str, str]
) -> None:
    refused(admin.put(f"{API}/teams/b/members/ann", headers=ann), 404, "not_found")
    refused(
        admin.put(f"{API}/teams/b/members/ann", json={"admin": True}, headers=ann),
        404,
        "not_found",
    )
    refused(admin.delete(f"{API}/teams/b/members/bob", headers=ann), 404, "not_found")
    assert "b" not in _user(admin, "ann")["teams"]


def test_a_team_admin_cannot_change_a_team_it_is_only_a_member_of(
    admin: TestClient, ann: dict[str, str]
) -> None:
    refused(admin.put(f"{API}/teams/c/members/bob", headers=ann), 403, "forbidden")
    refused(
        admin.put(f"{API}/teams/c/members/ann", json={"admin": True}, headers=ann),
        403,
        "forbidden",
    )
    assert _user(admin, "ann")["admin_of"] == ["a"]
    assert "c" not in _user(admin, "bob")["teams"]


def test_a_team_admin_cannot_do_what_only_pool_admins_do(
    admin: TestClient, ann: dict[str, str]
) -> None:
    calls = [
        ("PUT", "/teams/a/quota", {"limit": 100}),
        ("DELETE", "/teams/a", None),
        ("POST", "/teams", {"name": "mine"}),
        ("POST", "/users", {"name": "eve", "teams": ["a"]}),
        ("PATCH", "/users/ann", {"role": "admin"}),
        ("PATCH", "/users/ann", {"teams": ["a", "b"]}),
        ("PATCH", "/users/bob", {"password": "taken-over-1"}),
        ("POST", "/tokens", {"name": "t", "user": "bob"}),
        ("GET", "/users", None),
    ]
    for method, path, body in calls:
        answer = admin.request(method, f"{API}{path}", json=body, headers=ann)
        refused(answer, 403, "forbidden")
    team_a = next(t for t in admin.get(f"{API}/teams").json() if t["name"] == "a")
    assert team_a["limit"] is None
    assert (_user(admin, "ann")["role"], _user(admin, "ann")["teams"]) == ("member", ["a", "c"])


def test_losing_the_team_admin_role_takes_effect_at_once(
    admin: TestClient, ann: dict[str, str]
) -> None:
    assert admin.put(f"{API}/teams/a/members/bob", headers=ann).status_code == 200
    admin.put(f"{API}/teams/a/members/ann", json={"admin": False})
    refused(admin.delete(f"{API}/teams/a/members/bob", headers=ann), 403, "forbidden")
    admin.put(f"{API}/teams/a/members/ann", json={"admin": True})
    assert admin.delete(f"{API}/teams/a/members/bob", headers=ann).status_code == 200
    admin.delete(f"{API}/teams/a/members/ann")
    refused(admin.put(f"{API}/teams/a/members/bob", headers=ann), 404, "not_found")


def _user(admin: TestClient, name: str) -> dict:
    return next(u for u in admin.get(f"{API}/users").json() if u["name"] == name)
