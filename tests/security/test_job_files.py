"""Hostile job files: a member of another team applies documents that wait on a team's job,
submit into that team, or hide one such document among good ones; a viewer applies, even as
a dry run. Each is refused as the same request to the API's own routes is, and nothing of
the file is made (one transaction); a dry run reveals no more than a submit does."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, refused, running_app, wait_job

APPLY = "/api/v1/apply"
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
V1 = "gpupool/v1"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Teams vision (a member, a viewer) and audio (a member); vision has a job 'secret'."""
    data = tmp_path_factory.mktemp("hostile-job-files") / "data"
    with running_app(make_settings(data)) as (admin, _platform):
        headers = {name: _user(admin, name, team, role) for name, team, role in USERS}
        answer = admin.post(
            "/api/v1/jobs", json={"command": SLEEP, "name": "secret"}, headers=headers["vic"]
        )
        assert answer.status_code == 201, answer.text
        yield {"client": admin, "headers": headers, "secret": answer.json()["id"]}
        admin.post(f"/api/v1/jobs/{answer.json()['id']}/cancel")


USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))


def _job(name: str, **spec: object) -> dict:
    return {"apiVersion": V1, "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _jobs(client: TestClient) -> int:
    every = ["pending", "starting", "running", "succeeded", "failed", "cancelled", "lost"]
    return len(client.get("/api/v1/jobs", params={"status": every}).json())


@pytest.mark.parametrize("dry_run", [False, True])
def test_another_teams_job_cannot_be_waited_on_or_probed(world: dict, dry_run: bool) -> None:
    client, ada, secret = world["client"], world["headers"]["ada"], world["secret"]
    before = _jobs(client)
    answers = []
    for target in (secret, "secret", 10**9, "nothing"):
        documents = [
            _job("mine", command=["true"]),
            _job("probe", command=["true"], depends_on=[target]),
        ]
        body = {"documents": documents, "dry_run": dry_run}
        error = refused(client.post(APPLY, json=body, headers=ada), 422, "unknown_dependency")
        answers.append(error["message"].replace(str(target), "X"))
    assert answers[0] == answers[2] and answers[1] == answers[3]
    assert _jobs(client) == before  # 'mine' was not made either


def test_a_file_cannot_submit_into_another_team(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    before = _jobs(client)
    documents = [
        _job("mine", command=["true"]),
        _job("theirs", command=["true"], team="vision"),
        {"apiVersion": V1, "kind": "Notebook", "spec": {"team": "vision"}},
    ]
    error = refused(
        client.post(APPLY, json={"documents": documents}, headers=ada), 422, "unknown_team"
    )
    assert error["message"].startswith("document 2 (Job theirs): ")
    assert _jobs(client) == before


def test_a_viewer_may_read_the_schemas_but_not_apply(world: dict) -> None:
    client, val = world["client"], world["headers"]["val"]
    documents = [_job("view", command=["true"])]
    for dry_run in (False, True):
        body = {"documents": documents, "dry_run": dry_run}
        refused(client.post(APPLY, json=body, headers=val), 403, "forbidden")
    assert client.get("/api/v1/schemas/Job", headers=val).status_code == 200
    anonymous = {"Authorization": ""}
    refused(client.get("/api/v1/schemas/", headers=anonymous), 401, "unauthenticated")
    made = client.post(APPLY, json={"documents": documents}, headers=world["headers"]["vic"])
    assert made.status_code == 200, made.text
    assert wait_job(client, made.json()["documents"][0]["id"])["status"] == "succeeded"


def _user(admin: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": role}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}
