"""Hostile use of experiments: a member of another team lists, reads, pauses, resumes and
stops a team's experiment, by id or by name, and reads or cancels its trials' jobs; a
viewer of the team steers it; a member names another team in a new experiment. Everything
is refused (404 for what another team cannot see), and the experiment goes on."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, refused, running_app, wait_for

EXPERIMENTS = "/api/v1/experiments"
USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))


def body(name: str, **fields) -> dict:  # noqa: ANN003
    return {
        "name": name,
        "objective": {"metric": "loss"},
        "parameters": {"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True}},
        "max_trials": 3,
        "max_concurrent": 1,
        "trial": {"command": [sys.executable, "-c", "import time; time.sleep(60)"]},
        **fields,
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """vision's member made the experiment ``secret-search``; its first trial runs."""
    settings = make_settings(tmp_path_factory.mktemp("hostile-experiments") / "data")
    with running_app(settings) as (admin, platform):
        headers = {name: _user(admin, name, team, role) for name, team, role in USERS}
        made = admin.post(EXPERIMENTS, json=body("secret-search"), headers=headers["vic"])
        assert made.status_code == 201, made.text
        ref = str(made.json()["id"])
        shown = wait_for(
            lambda: (s := admin.get(f"{EXPERIMENTS}/{ref}").json())["trial_list"] and s,
            30,
            "its first trial",
            0.1,
        )
        yield {
            "client": admin,
            "headers": headers,
            "ref": ref,
            "job_id": shown["trial_list"][0]["job_id"],
        }


def test_another_teams_member_cannot_see_or_steer_it(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    assert client.get(EXPERIMENTS, headers=ada).json() == []
    for ref in (world["ref"], "secret-search"):
        refused(client.get(f"{EXPERIMENTS}/{ref}", headers=ada), 404, "not_found")
        for action in ("pause", "resume", "stop"):
            refused(client.post(f"{EXPERIMENTS}/{ref}/{action}", headers=ada), 404, "not_found")
    job = f"/api/v1/jobs/{world['job_id']}"
    refused(client.get(job, headers=ada), 404, "not_found")
    refused(client.get(f"{job}/metrics", headers=ada), 404, "not_found")
    refused(client.post(f"{job}/cancel", headers=ada), 404, "not_found")
    assert client.get(f"{EXPERIMENTS}/{world['ref']}").json()["status"] == "running"


def test_a_viewer_sees_it_but_cannot_steer_it(world: dict) -> None:
    client, val = world["client"], world["headers"]["val"]
    assert client.get(f"{EXPERIMENTS}/{world['ref']}", headers=val).status_code == 200
    for action in ("pause", "stop"):
        refused(
            client.post(f"{EXPERIMENTS}/{world['ref']}/{action}", headers=val), 403, "forbidden"
        )
    refused(client.post(EXPERIMENTS, json=body("viewer's"), headers=val), 403, "forbidden")


def test_a_member_cannot_make_one_in_another_team(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    answer = client.post(EXPERIMENTS, json=body("intruder", team="vision"), headers=ada)
    assert answer.status_code in (403, 404, 422), answer.text
    names = [e["name"] for e in client.get(EXPERIMENTS).json()]
    assert "intruder" not in names


def _user(admin: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    spec = {"name": name, "teams": [team], "role": role}
    assert admin.post("/api/v1/users", json=spec).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}
