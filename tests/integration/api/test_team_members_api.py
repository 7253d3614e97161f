"""Team membership and team admins, team deletion, own password changes and the last admin,
through the API, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.scheduler import SchedulerState
from gpupool.scheduler.types import Clock, Decisions, HandOver, Snapshot
from tests.support.platform import create_user, make_settings, refused, running_app, submit

TEAMS = "/api/v1/teams"


@pytest.fixture
def client(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    """The admin's client; the scheduler decides nothing, so submitted jobs stay pending."""

    def hold(
        _snapshot: Snapshot, _clock: Clock, _state: SchedulerState, _hand_over: HandOver | None
    ) -> Decisions:
        return Decisions()

    with running_app(make_settings(tmp_path / "data", database_url), decide=hold) as (
        admin,
        _platform,
    ):
        yield admin


def as_user(client: TestClient, name: str) -> dict[str, str]:
    """The headers of a request made as ``name`` (a new token of theirs)."""
    created = client.post("/api/v1/tokens", json={"name": "t", "user": name})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


def job_ids(client: TestClient, headers: dict[str, str]) -> list[int]:
    listed = client.get("/api/v1/jobs", params={"status": ["pending"]}, headers=headers)
    return [job["id"] for job in listed.json()]


def test_a_member_added_to_a_team_sees_its_jobs_until_removed(client: TestClient) -> None:
    assert client.post(TEAMS, json={"name": "ml"}).status_code == 201
    create_user(client, "ann")
    ann = as_user(client, "ann")
    job = submit(client, ["true"], team="ml")
    assert job["id"] not in job_ids(client, ann)

    added = client.put(f"{TEAMS}/ml/members/ann")
    assert added.status_code == 200, added.text
    assert added.json()["teams"] == ["default", "ml"]
    assert client.put(f"{TEAMS}/ml/members/ann").json()["teams"] == ["default", "ml"]
    assert job["id"] in job_ids(client, ann)

    assert client.delete(f"{TEAMS}/ml/members/ann").json()["teams"] == ["default"]
    assert job["id"] not in job_ids(client, ann)
    refused(client.delete(f"{TEAMS}/ml/members/ann"), 404, "not_found")
    refused(client.put(f"{TEAMS}/nope/members/ann"), 422, "unknown_team")
    refused(client.put(f"{TEAMS}/ml/members/nobody"), 404, "not_found")
    # a member may not change its team's members; a team it cannot see is not shown to exist
    refused(client.put(f"{TEAMS}/default/members/admin", headers=ann), 403, "forbidden")
    refused(client.put(f"{TEAMS}/ml/members/ann", headers=ann), 404, "not_found")
    refused(client.put(f"{TEAMS}/nope/members/ann", headers=ann), 404, "not_found")


def test_a_team_admin_manages_the_members_of_its_team_only(client: TestClient) -> None:
    for team in ("ml", "vision"):
        client.post(TEAMS, json={"name": team})
    create_user(client, "ann", teams=["ml", "vision"])
    create_user(client, "bob")
    ann = as_user(client, "ann")
    assert client.get("/api/v1/whoami", headers=ann).json()["admin_of"] == []

    made = client.put(f"{TEAMS}/ml/members/ann", json={"admin": True})
    assert made.status_code == 200, made.text
    assert (made.json()["teams"], made.json()["admin_of"]) == (["ml", "vision"], ["ml"])
    assert client.get("/api/v1/whoami", headers=ann).json()["admin_of"] == ["ml"]
    admins = {team["name"]: team["admins"] for team in client.get(TEAMS, headers=ann).json()}
    assert admins == {"ml": ["ann"], "vision": []}

    added = client.put(f"{TEAMS}/ml/members/bob", headers=ann)
    assert added.status_code == 200, added.text
    assert (added.json()["teams"], added.json()["admin_of"]) == (["default", "ml"], [])
    promoted = client.put(f"{TEAMS}/ml/members/bob", json={"admin": True}, headers=ann)
    assert promoted.json()["admin_of"] == ["ml"]
    kept = client.put(f"{TEAMS}/ml/members/bob", headers=ann)  # no body: stays a team admin
    assert kept.json()["admin_of"] == ["ml"]
    bob = as_user(client, "bob")
    assert (
        client.put(f"{TEAMS}/ml/members/ann", json={"admin": False}, headers=bob).json()["admin_of"]
        == []
    )

    # ann is a member of ml and vision now, an admin of neither
    refused(client.put(f"{TEAMS}/ml/members/admin", headers=ann), 403, "forbidden")
    refused(client.put(f"{TEAMS}/vision/members/bob", headers=bob), 404, "not_found")
    removed = client.delete(f"{TEAMS}/ml/members/ann", headers=bob)
    assert removed.json()["teams"] == ["vision"]
    assert client.delete(f"{TEAMS}/ml/members/bob", headers=bob).json()["admin_of"] == []
    refused(client.put(f"{TEAMS}/ml/members/bob", headers=bob), 404, "not_found")


def test_a_team_admin_acts_on_its_teams_jobs_as_a_member_does(client: TestClient) -> None:
    client.post(TEAMS, json={"name": "ml"})
    create_user(client, "ann", teams=["ml"])
    client.put(f"{TEAMS}/ml/members/ann", json={"admin": True})
    ann = as_user(client, "ann")
    job = submit(client, ["true"], team="ml")
    assert job["id"] in job_ids(client, ann)
    cancelled = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=ann)
    assert cancelled.status_code == 200, cancelled.text
    mine = client.post("/api/v1/jobs", json={"command": ["true"], "team": "ml"}, headers=ann)
    assert mine.status_code == 201, mine.text


def test_a_viewer_is_no_team_admin(client: TestClient) -> None:
    client.post(TEAMS, json={"name": "ml"})
    create_user(client, "vic", role="viewer", teams=["ml"])
    busy = refused(
        client.put(f"{TEAMS}/ml/members/vic", json={"admin": True}), 409, "viewer_not_team_admin"
    )
    assert "gpupool users set-role vic member" in busy["message"]

    create_user(client, "ann", teams=["ml"])
    client.put(f"{TEAMS}/ml/members/ann", json={"admin": True})
    demoted = client.patch("/api/v1/users/ann", json={"role": "viewer"})
    assert (demoted.json()["role"], demoted.json()["admin_of"]) == ("viewer", [])
    ann = as_user(client, "ann")
    refused(client.put(f"{TEAMS}/ml/members/vic", headers=ann), 403, "forbidden")


def test_a_team_is_deleted_once_it_has_no_unfinished_job(client: TestClient) -> None:
    client.post(TEAMS, json={"name": "ml"})
    job = submit(client, ["true"], team="ml")
    busy = refused(client.delete(f"{TEAMS}/ml"), 409, "team_not_empty")
    assert "gpupool cancel" in busy["message"]

    assert client.post(f"/api/v1/jobs/{job['id']}/cancel").status_code == 200
    deleted = client.delete(f"{TEAMS}/ml")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"name": "ml", "finished_jobs": 1}
    assert "ml" not in [team["name"] for team in client.get(TEAMS).json()]
    kept = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert (kept["status"], kept["team"]) == ("cancelled", "ml (deleted)")
    refused(
        client.post("/api/v1/jobs", json={"command": ["true"], "team": "ml"}), 422, "unknown_team"
    )
    refused(client.delete(f"{TEAMS}/ml"), 422, "unknown_team")
    refused(client.put(f"{TEAMS}/ml/quota", json={"limit": 2}), 422, "unknown_team")

    assert client.post(TEAMS, json={"name": "ml"}).status_code == 201  # the name is free
    refused(client.post(TEAMS, json={"name": "ml"}), 409, "conflict")  # once
    again = submit(client, ["true"], team="ml")
    teams_of = {j["id"]: j["team"] for j in client.get("/api/v1/jobs?status=cancelled").json()}
    assert teams_of[job["id"]] == "ml (deleted)"
    assert client.get(f"/api/v1/jobs/{again['id']}").json()["team"] == "ml"
    assert [t["name"] for t in client.get(TEAMS).json()].count("ml") == 1
    history = client.get(f"{TEAMS}/history").json()["teams"]
    assert [series["team"] for series in history].count("ml") == 1

    client.post(f"/api/v1/jobs/{again['id']}/cancel")
    assert client.delete(f"{TEAMS}/ml").json() == {"name": "ml", "finished_jobs": 1}
    assert client.post(TEAMS, json={"name": "ml"}).status_code == 201  # and free again
    assert client.delete(f"{TEAMS}/ml").json() == {"name": "ml", "finished_jobs": 0}
    refused(client.delete(f"{TEAMS}/default"), 409, "default_team")


def test_only_admins_delete_teams(client: TestClient) -> None:
    client.post(TEAMS, json={"name": "ml"})
    create_user(client, "ann", teams=["ml"])
    refused(client.delete(f"{TEAMS}/ml", headers=as_user(client, "ann")), 403, "forbidden")


def test_a_user_changes_its_own_password(client: TestClient) -> None:
    create_user(client, "ann")
    ann = as_user(client, "ann")
    change = "/api/v1/whoami/password"
    first = client.post(change, json={"new": "first-password"}, headers=ann)
    assert first.status_code == 200, first.text
    assert first.json()["user"] == "ann"

    refused(
        client.post(change, json={"new": "second-password"}, headers=ann), 403, "wrong_password"
    )
    wrong = {"current": "nope", "new": "second-password"}
    refused(client.post(change, json=wrong, headers=ann), 403, "wrong_password")
    short = {"current": "first-password", "new": "short"}
    refused(client.post(change, json=short, headers=ann), 422, "invalid_request")
    right = {"current": "first-password", "new": "second-password"}
    assert client.post(change, json=right, headers=ann).status_code == 200

    signed_in = client.post("/api/v1/session", json={"user": "ann", "password": "second-password"})
    assert signed_in.status_code == 200, signed_in.text


def test_the_last_enabled_admin_stays(client: TestClient) -> None:
    refused(client.patch("/api/v1/users/admin", json={"disabled": True}), 409, "last_admin")
    refused(client.patch("/api/v1/users/admin", json={"role": "member"}), 409, "last_admin")
    create_user(client, "root2", role="admin")
    assert client.patch("/api/v1/users/root2", json={"disabled": True}).status_code == 200
    refused(client.patch("/api/v1/users/admin", json={"disabled": True}), 409, "last_admin")
    assert client.patch("/api/v1/users/root2", json={"disabled": False}).status_code == 200
    assert client.patch("/api/v1/users/admin", json={"role": "member"}).status_code == 200
