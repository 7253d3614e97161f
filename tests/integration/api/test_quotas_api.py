"""Team quotas through the API, on SQLite and on PostgreSQL: set, read back, refused."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, running_app, submit, wait_job

TEAMS = "/api/v1/teams"
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def client(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    """4 declared A100s and 2 declared H100s on one node."""
    settings = make_settings(
        tmp_path / "data", database_url, declared_gpus="4xA100-SXM4-80GB:80GiB,2xH100:80GiB"
    )
    with running_app(settings) as (client, _platform):
        yield client


def team(client: TestClient, name: str) -> dict:
    return next(t for t in client.get(TEAMS).json() if t["name"] == name)


def refused(response, status: int, code: str) -> str:  # noqa: ANN001 - an httpx response
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return error["message"]


def test_a_team_is_created_with_a_quota_and_the_quota_is_replaced(client: TestClient) -> None:
    body = {"name": "ml", "guarantee": {"*": 2, "A100": 2}, "limit": 5, "weight": 2}
    created = client.post(TEAMS, json=body)
    assert created.status_code == 201, created.text
    assert created.json()["guarantee"] == {"*": 2, "A100": 2}
    listed = team(client, "ml")
    assert (listed["limit"], listed["weight"], listed["pending"]) == (5, 2, 0)
    assert listed["usage"] == {"gpus": 0, "by_model": {}}

    replaced = client.put(f"{TEAMS}/ml/quota", json={"guarantee": {" H100 ": 1, "*": 0}})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["guarantee"] == {"H100": 1}, "keys stripped, zero entries dropped"
    assert (replaced.json()["limit"], replaced.json()["weight"]) == (None, 1)
    assert team(client, "ml")["guarantee"] == {"H100": 1}


def test_a_team_without_a_quota_reads_as_none(client: TestClient) -> None:
    default = team(client, "default")
    assert (default["guarantee"], default["limit"], default["weight"]) == ({}, None, 1)


def test_usage_and_pending_count_what_the_team_holds_and_waits_for(client: TestClient) -> None:
    client.post(TEAMS, json={"name": "cv"})
    running = submit(client, SLEEP, team="cv", resources={"gpus": 2}, gpu_types=["A100"])
    wait_job(client, running["id"], {"running"})
    waiting = submit(client, ["true"], team="cv", resources={"gpus": 4}, gpu_types=["A100"])
    seen = team(client, "cv")
    assert seen["usage"] == {"gpus": 2, "by_model": {"A100-SXM4-80GB": 2}}
    assert seen["pending"] == 1
    for job in (running, waiting):
        client.post(f"/api/v1/jobs/{job['id']}/cancel")
    wait_job(client, running["id"])


def test_the_limit_may_not_be_below_the_guarantee(client: TestClient) -> None:
    message = refused(
        client.post(TEAMS, json={"name": "ml", "guarantee": {"*": 3}, "limit": 2}),
        422,
        "limit_below_guarantee",
    )
    assert "limit (2 GPUs)" in message and "guarantee (3 GPUs)" in message
    assert "ml" not in [t["name"] for t in client.get(TEAMS).json()], "refused as a whole"


def test_guarantees_may_not_add_up_to_more_than_the_pool(client: TestClient) -> None:
    assert client.post(TEAMS, json={"name": "ml", "guarantee": {"A100": 3}}).status_code == 201
    client.post(TEAMS, json={"name": "cv"})
    message = refused(
        client.put(f"{TEAMS}/cv/quota", json={"guarantee": {"a100": 2}}),
        409,
        "guarantees_exceed_pool",
    )
    assert "add up to 5 GPUs (cv 2, ml 3)" in message and "4 a100 GPUs" in message
    message = refused(
        client.put(f"{TEAMS}/cv/quota", json={"guarantee": {"*": 4}}),
        409,
        "guarantees_exceed_pool",
    )
    assert "7 GPUs" in message and "6 GPUs in all" in message
    refused(
        client.put(f"{TEAMS}/cv/quota", json={"guarantee": {"V100": 1}}),
        409,
        "guarantees_exceed_pool",
    )
    fits = client.put(f"{TEAMS}/cv/quota", json={"guarantee": {"A100": 1, "H100": 2}})
    assert fits.status_code == 200, fits.text
    lowered = client.put(f"{TEAMS}/ml/quota", json={"guarantee": {"A100": 2}})
    assert lowered.status_code == 200, "a team's own old guarantee does not count twice"


@pytest.mark.parametrize(
    "body",
    [
        {"guarantee": {"*": -1}},
        {"limit": -2},
        {"weight": 0},
        {"weight": -1},
        {"guarantee": {"": 1}},
        {"guarantee": {"A100": "many"}},
        {"guarantee": {"*": 1}, "extra": 1},
    ],
)
def test_invalid_quotas_are_refused_with_the_field(client: TestClient, body: dict) -> None:
    refused(client.put(f"{TEAMS}/default/quota", json=body), 422, "invalid_request")


def test_a_model_named_twice_and_an_unknown_team_are_refused(client: TestClient) -> None:
    twice = client.put(f"{TEAMS}/default/quota", json={"guarantee": {"A100": 1, "a100 ": 1}})
    assert "twice" in refused(twice, 422, "invalid_request")
    refused(client.put(f"{TEAMS}/nope/quota", json={}), 422, "unknown_team")


def test_only_admins_set_quotas(client: TestClient) -> None:
    member = {"name": "mia", "role": "member", "teams": ["default"]}
    assert client.post("/api/v1/users", json=member).status_code == 201
    token = client.post("/api/v1/tokens", json={"user": "mia"}).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    put = client.put(f"{TEAMS}/default/quota", json={"limit": 1}, headers=headers)
    refused(put, 403, "forbidden")
    refused(client.post(TEAMS, json={"name": "x"}, headers=headers), 403, "forbidden")
    assert [t["name"] for t in client.get(TEAMS, headers=headers).json()] == ["default"]


def test_an_empty_pool_accepts_any_guarantee(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", declared_gpus=None, sysfs_root=tmp_path / "sys")
    with running_app(settings) as (client, _platform):
        body = {"name": "ml", "guarantee": {"*": 64, "A100": 8}}
        assert client.post(TEAMS, json=body).status_code == 201


def test_a_quota_put_without_storage_keeps_the_storage_quota(client: TestClient) -> None:
    created = client.post(TEAMS, json={"name": "data", "storage": 10 * 1024**3})
    assert created.status_code == 201, created.text
    changed = client.put(f"{TEAMS}/data/quota", json={"limit": 2, "weight": 3})
    assert changed.status_code == 200, changed.text
    assert changed.json()["storage"]["quota"] == 10 * 1024**3, "left out: kept"
    assert (changed.json()["limit"], changed.json()["weight"]) == (2, 3)
    assert team(client, "data")["storage"]["quota"] == 10 * 1024**3
    cleared = client.put(f"{TEAMS}/data/quota", json={"limit": 2, "storage": None})
    assert cleared.json()["storage"]["quota"] is None, "an explicit null removes it"
    assert team(client, "data")["storage"]["quota"] is None
