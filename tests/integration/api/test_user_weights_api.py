"""Users' fair-share weights through the API, on SQLite and on PostgreSQL: set by admins only,
refused when not above 0, and fed to the scheduler's snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.types import Clock, Decisions, HandOver, Snapshot
from gpupool.services.platform import Platform
from gpupool.services.scheduling._snapshots import build_snapshot
from tests.support.platform import create_user, make_settings, refused, running_app

USERS = "/api/v1/users"


@pytest.fixture
def app(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Platform]]:
    """4 declared A100s; the scheduler decides nothing, so submitted jobs stay pending."""

    def hold(
        _snapshot: Snapshot, _clock: Clock, _state: SchedulerState, _hand_over: HandOver | None
    ) -> Decisions:
        return Decisions()

    with running_app(make_settings(tmp_path / "data", database_url), decide=hold) as running:
        yield running


def token_of(client: TestClient, user: str) -> str:
    created = client.post("/api/v1/tokens", json={"name": "t", "user": user})
    assert created.status_code == 201, created.text
    return created.json()["token"]


def test_a_weight_is_set_at_creation_changed_and_listed(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    assert create_user(client, "ann")["weight"] == 1
    assert create_user(client, "bob", weight=2.5)["weight"] == 2.5
    changed = client.patch(f"{USERS}/ann", json={"weight": 0.5})
    assert changed.status_code == 200, changed.text
    assert changed.json()["weight"] == 0.5
    listed = {u["name"]: u["weight"] for u in client.get(USERS).json()}
    assert listed == {"admin": 1, "ann": 0.5, "bob": 2.5}


@pytest.mark.parametrize("weight", ["0", "-1", "1e7", "NaN", "Infinity"])
def test_a_weight_not_above_0_is_refused_with_a_helpful_message(
    app: tuple[TestClient, Platform], weight: str
) -> None:
    client, _ = app
    create_user(client, "ann")
    json = {"content-type": "application/json"}  # raw bodies: NaN is no JSON httpx writes
    patch = client.patch(f"{USERS}/ann", content=f'{{"weight": {weight}}}', headers=json)
    error = refused(patch, 422, "invalid_weight")
    assert "above 0" in error["message"] and "twice the GPU time" in error["message"]
    assert error["details"]["fields"][0]["field"] == "weight"
    post = client.post(USERS, content=f'{{"name": "cy", "weight": {weight}}}', headers=json)
    refused(post, 422, "invalid_weight")
    assert client.get(f"{USERS}").json()[1]["weight"] == 1, "nothing changed"


@pytest.mark.parametrize("weight", ["two", True, None, [1]])
def test_a_weight_that_is_no_number_is_refused(
    app: tuple[TestClient, Platform], weight: object
) -> None:
    client, _ = app
    create_user(client, "ann")
    body = {"weight": weight}
    response = client.patch(f"{USERS}/ann", json=body)
    if weight is None:  # a PATCH leaves out what is None
        assert response.status_code == 200 and response.json()["weight"] == 1
        return
    error = refused(response, 422, "invalid_request")
    assert error["details"]["fields"][0]["field"].startswith("weight")


def test_only_admins_change_weights(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    create_user(client, "ann")
    ann = {"Authorization": f"Bearer {token_of(client, 'ann')}"}
    refused(client.patch(f"{USERS}/ann", json={"weight": 5}, headers=ann), 403, "forbidden")
    refused(client.post(USERS, json={"name": "x", "weight": 5}, headers=ann), 403, "forbidden")
    refused(client.patch(f"{USERS}/nobody", json={"weight": 2}), 404, "not_found")


def test_weights_reach_the_snapshot_and_share_the_team_between_its_users(
    app: tuple[TestClient, Platform],
) -> None:
    """Ann (weight 3) and Bob (weight 1), no past usage, 4 GPUs: Ann gets 3, Bob 1."""
    client, platform = app
    create_user(client, "ann", weight=3)
    create_user(client, "bob")
    for user in ("ann", "bob"):
        headers = {"Authorization": f"Bearer {token_of(client, user)}"}
        for _ in range(4):
            body = {"command": ["true"], "resources": {"gpus": 1}}
            assert client.post("/api/v1/jobs", json=body, headers=headers).status_code == 201
    with platform.db.reader() as session:
        snapshot = build_snapshot(session, platform.clock.now())
    assert dict(snapshot.weights) == {"ann": 3}
    owners = {job.job_id: job.user for job in snapshot.pending}
    placed = [owners[p.job_id] for p in schedule(snapshot, platform.clock).placements]
    assert sorted(placed) == ["ann", "ann", "ann", "bob"]

    assert client.patch(f"{USERS}/ann", json={"weight": 1}).status_code == 200
    with platform.db.reader() as session:  # the loop's builder: the change reaches it at once
        snapshot = platform.loop.snapshots.build(session, platform.clock.now())
    assert dict(snapshot.weights) == {}
    placed = [owners[p.job_id] for p in schedule(snapshot, platform.clock).placements]
    assert sorted(placed) == ["ann", "ann", "bob", "bob"]
