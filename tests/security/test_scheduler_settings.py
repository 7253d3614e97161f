"""Hostile changes of the scheduler's settings: a member (or a team's admin, who is no admin of
the pool) tries to make its team's jobs first by changing the LAS levels, the minimum runtime or
the packing, to roll back to settings that favoured it, or to read who changed what. Each is
refused (403), nothing is recorded, and the policy the control loop uses stays as it was. Nor
may they queue a tuning, export the pool's history or replay it (it names every team's jobs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.platform import make_settings, running_app

API = "/api/v1/scheduler"
CONFIG = f"{API}/config"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    data = tmp_path_factory.mktemp("hostile-settings") / "data"
    with running_app(make_settings(data)) as (admin, platform):
        assert admin.post("/api/v1/teams", json={"name": "vision"}).status_code == 201
        headers = {}
        for name in ("vic", "tia"):
            body = {"name": name, "teams": ["vision"], "role": "member"}
            assert admin.post("/api/v1/users", json=body).status_code == 201
            token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
            headers[name] = {"Authorization": f"Bearer {token}"}
        made_admin = admin.put("/api/v1/teams/vision/members/tia", json={"admin": True})
        assert made_admin.status_code == 200, made_admin.text
        answer = admin.put(CONFIG, json={"min_runtime": 600, "reason": "site's choice"})
        assert answer.status_code == 200, answer.text
        tuned = admin.post(f"{API}/tunes", json={"window": 7200, "holdout": 3600})
        assert tuned.status_code == 202, tuned.text
        yield {"client": admin, "platform": platform, "headers": headers}


@pytest.mark.parametrize("who", ["vic", "tia"])
def test_a_member_or_a_team_admin_cannot_change_roll_back_or_read_the_history(
    world: dict, who: str
) -> None:
    client: TestClient = world["client"]
    platform: Platform = world["platform"]
    headers = world["headers"][who]
    before = client.get(CONFIG).json()
    policy = platform.loop.snapshots.policy
    attempts = [
        client.put(CONFIG, json={"las_thresholds": [1e9], "reason": "mine first"}, headers=headers),
        client.put(
            CONFIG, json={"min_runtime": 0, "reason": "x", "if_version": 1}, headers=headers
        ),
        client.post(f"{CONFIG}/rollback", json={"version": 0, "reason": "x"}, headers=headers),
        client.get(f"{CONFIG}/history", headers=headers),
    ]
    for answer in attempts:
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "forbidden"
    assert client.get(CONFIG).json() == before
    assert platform.loop.snapshots.policy == policy
    assert [v["version"] for v in client.get(f"{CONFIG}/history").json()] == [1]
    assert client.get(CONFIG, headers=headers).json() == before, "reading is every user's"


@pytest.mark.parametrize("who", ["vic", "tia"])
def test_a_member_or_a_team_admin_cannot_tune_export_or_replay_the_pools_history(
    world: dict, who: str
) -> None:
    """The history names every team's jobs and users: only admins of the pool read it, and
    only they ask for a tuning that may adopt settings."""
    client: TestClient = world["client"]
    headers = world["headers"][who]
    before = [t["id"] for t in client.get(f"{API}/tunes").json()]
    attempts = [
        client.post(f"{API}/tunes", json={"apply": True}, headers=headers),
        client.get(f"{API}/tunes", headers=headers),
        client.get(f"{API}/trace", headers=headers),
        client.get(f"{API}/fidelity", headers=headers),
    ]
    attempts.append(client.get(f"{API}/tunes/{before[0]}", headers=headers))
    for answer in attempts:
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "forbidden"
    assert [t["id"] for t in client.get(f"{API}/tunes").json()] == before, "nothing queued"
