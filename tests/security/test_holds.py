"""Hostile holds: a member of another team holds a team's pending job (to keep it from ever
starting) or releases its held one (to start it before its owners meant to). Each is answered
exactly as a cancel of that job is (404, as for a job that does not exist), whatever the job's
state, and the job is left as it was; a member of the job's own team may do both."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, running_app

JOBS = "/api/v1/jobs"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Teams vision (vic, vera) and audio (ada); vision has a held job and a job that waits
    for it (pending, not held)."""
    data = tmp_path_factory.mktemp("hostile-holds") / "data"
    with running_app(make_settings(data)) as (admin, _platform):
        headers = {name: _user(admin, name, team) for name, team in USERS}
        held = _submit(admin, headers["vic"], hold=True)
        waiting = _submit(admin, headers["vic"], depends_on=[str(held)])
        yield {"client": admin, "headers": headers, "held": held, "waiting": waiting}
        for job_id in (held, waiting):
            admin.post(f"{JOBS}/{job_id}/cancel")


USERS = (("vic", "vision"), ("vera", "vision"), ("ada", "audio"))


def test_another_teams_member_is_answered_as_for_a_cancel_and_changes_nothing(
    world: dict,
) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    before = {job_id: _state(client, job_id) for job_id in (world["held"], world["waiting"])}
    unknown = 10**9
    for job_id in (world["held"], world["waiting"], unknown):
        cancel = client.post(f"{JOBS}/{job_id}/cancel", headers=ada)
        assert cancel.status_code == 404
        for action in ("hold", "release"):
            answer = client.post(f"{JOBS}/{job_id}/{action}", headers=ada)
            assert (answer.status_code, answer.json()) == (cancel.status_code, cancel.json())
            assert _as_unknown(answer.json(), job_id, unknown) == _missing(client, ada, unknown)
    after = {job_id: _state(client, job_id) for job_id in before}
    assert after == before


def test_a_member_of_the_jobs_team_may_hold_and_release_it(world: dict) -> None:
    client, vera = world["client"], world["headers"]["vera"]
    held = client.post(f"{JOBS}/{world['waiting']}/hold", headers=vera)
    assert held.status_code == 200 and held.json()["reason"] == "Held"
    released = client.post(f"{JOBS}/{world['waiting']}/release", headers=vera)
    assert released.status_code == 200 and released.json()["message"].startswith("released by vera")


def _state(client: TestClient, job_id: int) -> tuple:
    job = client.get(f"{JOBS}/{job_id}").json()
    return job["status"], job["reason"], job["message"], len(job["events"])


def _missing(client: TestClient, headers: dict[str, str], unknown: int) -> dict:
    return client.post(f"{JOBS}/{unknown}/hold", headers=headers).json()


def _as_unknown(error: dict, job_id: int, unknown: int) -> dict:
    """``error`` as it reads with ``unknown`` in place of ``job_id``."""
    return json.loads(json.dumps(error).replace(str(job_id), str(unknown)))


def _user(admin: TestClient, name: str, team: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": "member"}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def _submit(admin: TestClient, headers: dict[str, str], **fields: object) -> int:
    answer = admin.post(JOBS, json={"command": ["true"], **fields}, headers=headers)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]
