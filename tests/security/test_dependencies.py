"""Hostile job dependencies: a member of another team makes a job depend on a team's job,
by id or by name, to learn whether it exists, when it ends, or how. Every such dependency is
refused exactly as one on a job that does not exist (same status, code and message but for
the id), so nothing is learnt; an admin's job of one team cannot wait on another team's."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, refused, running_app, wait_job

JOBS = "/api/v1/jobs"
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Teams vision and audio with a member each; vision has a running job named 'secret'
    and a finished one named 'done'."""
    data = tmp_path_factory.mktemp("hostile-dependencies") / "data"
    with running_app(make_settings(data)) as (admin, _platform):
        headers = {name: _user(admin, name, team) for name, team in USERS}
        secret = _submit(admin, headers["vic"], SLEEP, name="secret")
        done = _submit(admin, headers["vic"], ["true"], name="done")
        wait_job(admin, done)
        yield {"client": admin, "headers": headers, "secret": secret, "done": done}
        admin.post(f"{JOBS}/{secret}/cancel")


USERS = (("vic", "vision"), ("ada", "audio"))


def test_another_teams_job_id_is_answered_as_an_unknown_id(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    unknown = 10**9
    missing = _refusal(client, ada, [unknown])
    for job_id in (world["secret"], world["done"]):
        for form in ([job_id], [f"afterany:{job_id}"], [{"job": str(job_id)}]):
            theirs = _refusal(client, ada, form)
            assert theirs == _with_id(missing, unknown, job_id)


def test_another_teams_job_name_is_answered_as_an_unknown_name(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    missing = _refusal(client, ada, ["no-such-job"])
    for name in ("secret", "done"):
        theirs = _refusal(client, ada, [f"afternotok:{name}"])
        assert theirs == _with_id(missing, "no-such-job", name)
    assert client.get(f"{JOBS}/{world['secret']}", headers=ada).status_code == 404


def test_an_admins_job_waits_only_on_jobs_of_its_own_team(world: dict) -> None:
    client = world["client"]  # the admin: sees every team, submits to one
    body = {"command": ["true"], "team": "audio", "depends_on": [world["done"]]}
    refused(client.post(JOBS, json=body), 422, "unknown_dependency")
    body = {"command": ["true"], "team": "vision", "depends_on": [world["done"]]}
    answer = client.post(JOBS, json=body)
    assert answer.status_code == 201, answer.text
    assert wait_job(client, answer.json()["id"])["status"] == "succeeded"


def _refusal(client: TestClient, headers: dict[str, str], depends_on: list) -> dict:
    body = {"command": ["true"], "depends_on": depends_on}
    return refused(client.post(JOBS, json=body, headers=headers), 422, "unknown_dependency")


def _with_id(error: dict, old: object, new: object) -> dict:
    """``error`` as it reads with ``new`` in place of ``old``."""
    return json.loads(json.dumps(error).replace(str(old), str(new)))


def _user(admin: TestClient, name: str, team: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": "member"}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def _submit(admin: TestClient, headers: dict[str, str], command: list[str], **fields) -> int:  # noqa: ANN003
    answer = admin.post(JOBS, json={"command": command, **fields}, headers=headers)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]
