"""The nodes API in-process: who holds each GPU, as each caller may see it.

A member of another team sees a job's GPUs and share but not its id, name, user or team; a
member of the job's team and an admin see everything.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, running_app, submit, wait_job

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path / "data")) as (client, _platform):
        yield client


def member(client: TestClient, name: str, team: str) -> dict[str, str]:
    """Headers of a new member of ``team`` (made if new)."""
    if team not in {t["name"] for t in client.get("/api/v1/teams").json()}:
        assert client.post("/api/v1/teams", json={"name": team}).status_code == 201
    made = client.post("/api/v1/users", json={"name": name, "teams": [team]})
    assert made.status_code == 201, made.text
    token = client.post("/api/v1/tokens", json={"user": name, "name": "t"}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def holders(client: TestClient, headers: dict[str, str], path: str = "/api/v1/nodes") -> list:
    answer = client.get(path, headers=headers)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    nodes = found if isinstance(found, list) else [found]
    return [h for node in nodes for gpu in node["gpus"] for h in gpu["holders"]]


def test_another_teams_job_shows_only_what_it_holds(client: TestClient) -> None:
    ann = member(client, "ann", "team-a")
    bob = member(client, "bob", "team-b")
    job = client.post(
        "/api/v1/jobs",
        json={"command": SLEEP, "name": "secret-run", "resources": {"gpus": 0.5}},
        headers=ann,
    ).json()
    wait_job(client, job["id"], {"running"})

    for path in ("/api/v1/nodes", "/api/v1/nodes/node-a"):
        seen = holders(client, bob, path)
        assert seen == [
            {
                "job_id": None,
                "job_name": None,
                "user": None,
                "team": None,
                "share": 0.5,
                "memory_bytes": seen[0]["memory_bytes"],
                "other_team": True,
            }
        ]
        assert seen[0]["memory_bytes"] > 0, "what it holds is shown"
        answer = client.get(path, headers=bob).text
        assert "secret-run" not in answer and "ann" not in answer and "team-a" not in answer
        for who in (ann, {}):  # its own team, and the admin (the client's own token)
            (own,) = holders(client, who, path)
            assert (own["job_id"], own["job_name"], own["user"], own["team"]) == (
                job["id"],
                "secret-run",
                "ann",
                "team-a",
            )
            assert own["other_team"] is False
    used = client.get("/api/v1/nodes", headers=bob).json()[0]["gpus"]
    assert sum(g["used_share"] for g in used) == 0.5, "the GPU counts as in use all the same"


def test_a_member_of_both_teams_sees_the_job(client: TestClient) -> None:
    ann = member(client, "ann", "team-a")
    member(client, "bob", "team-b")
    both = client.post("/api/v1/users", json={"name": "cat", "teams": ["team-a", "team-b"]})
    assert both.status_code == 201, both.text
    token = client.post("/api/v1/tokens", json={"user": "cat", "name": "t"}).json()["token"]
    job = submit(client, SLEEP, resources={"gpus": 1}, team="team-a")
    wait_job(client, job["id"], {"running"})
    (seen,) = holders(client, {"Authorization": f"Bearer {token}"})
    assert (seen["job_id"], seen["other_team"]) == (job["id"], False)
    (seen_by_ann,) = holders(client, ann)
    assert seen_by_ann["user"] == "admin", "a team's member sees who of the team runs it"
