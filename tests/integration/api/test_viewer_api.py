"""A viewer sees its team's jobs and arrays but may not cancel them (403, nothing changes);
a member of another team is not told they exist (404). Through the API, in process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.scheduler import SchedulerState
from gpupool.scheduler.types import Clock, Decisions, HandOver, Snapshot
from tests.support.platform import make_settings, refused, running_app

JOBS = "/api/v1/jobs"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """The admin's client; the scheduler decides nothing, so submitted jobs stay pending."""

    def hold(
        _snapshot: Snapshot, _clock: Clock, _state: SchedulerState, _hand_over: HandOver | None
    ) -> Decisions:
        return Decisions()

    with running_app(make_settings(tmp_path / "data"), decide=hold) as (admin, _platform):
        for team in ("vision", "audio"):
            assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
        yield admin


def caller(client: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    """The headers of a new user of ``team`` with ``role``."""
    body = {"name": name, "teams": [team], "role": role}
    assert client.post("/api/v1/users", json=body).status_code == 201
    created = client.post("/api/v1/tokens", json={"name": "t", "user": name})
    return {"Authorization": f"Bearer {created.json()['token']}"}


def test_a_viewer_cannot_cancel_its_teams_job(client: TestClient) -> None:
    member = caller(client, "mia", "vision", "member")
    viewer = caller(client, "vic", "vision", "viewer")
    job = client.post(JOBS, json={"command": ["true"]}, headers=member).json()

    assert client.get(f"{JOBS}/{job['id']}", headers=viewer).status_code == 200
    error = refused(client.post(f"{JOBS}/{job['id']}/cancel", headers=viewer), 403, "forbidden")
    assert "viewer" in error["message"]
    after = client.get(f"{JOBS}/{job['id']}", headers=member).json()
    assert after["status"] == "pending" and not after["cancel_requested"]


def test_a_viewer_cannot_cancel_its_teams_array(client: TestClient) -> None:
    member = caller(client, "mia", "vision", "member")
    viewer = caller(client, "vic", "vision", "viewer")
    body = {"command": ["true"], "array": {"indexes": "0-2"}}
    array = client.post(JOBS, json=body, headers=member).json()

    cancel = client.post(f"{JOBS}/arrays/{array['id']}/cancel", headers=viewer)
    refused(cancel, 403, "forbidden")
    after = client.get(f"{JOBS}/arrays/{array['id']}", headers=member).json()
    assert after["counts"] == {"pending": 3}


def test_another_teams_member_is_not_told_the_job_exists(client: TestClient) -> None:
    member = caller(client, "mia", "vision", "member")
    stranger = caller(client, "sam", "audio", "member")
    job = client.post(JOBS, json={"command": ["true"]}, headers=member).json()
    array = client.post(
        JOBS, json={"command": ["true"], "array": {"indexes": "0-1"}}, headers=member
    )

    refused(client.post(f"{JOBS}/{job['id']}/cancel", headers=stranger), 404, "not_found")
    refused(
        client.post(f"{JOBS}/arrays/{array.json()['id']}/cancel", headers=stranger),
        404,
        "not_found",
    )
    assert client.get(f"{JOBS}/{job['id']}", headers=member).json()["status"] == "pending"
