"""Users mapped to Unix accounts through the API, on SQLite and on PostgreSQL: set by admins
only, cleared with null, and refused (with what to do) for accounts jobs must not run under."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.platform import create_user, make_settings, refused, running_app
from tests.support.unix import own_account, system_account

USERS = "/api/v1/users"


@pytest.fixture
def app(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Platform]]:
    with running_app(make_settings(tmp_path / "data", database_url)) as running:
        yield running


@pytest.fixture(scope="module")
def account() -> Iterator[str]:
    """An existing unprivileged Unix account (made for the module: needs root)."""
    with system_account() as name:
        yield name


def unix_users(client: TestClient) -> dict[str, str | None]:
    return {user["name"]: user["unix_user"] for user in client.get(USERS).json()}


def test_an_admin_maps_users_to_an_account_changes_and_clears_it(
    app: tuple[TestClient, Platform], account: str
) -> None:
    client, _ = app
    assert create_user(client, "ann", unix_user=account)["unix_user"] == account
    assert create_user(client, "bob")["unix_user"] is None
    assert unix_users(client) == {"admin": None, "ann": account, "bob": None}

    shared = client.patch(f"{USERS}/bob", json={"unix_user": account})  # like Slurm: allowed
    assert shared.status_code == 200, shared.text
    assert shared.json()["unix_user"] == account
    kept = client.patch(f"{USERS}/ann", json={"weight": 2})  # left out: unchanged
    assert kept.status_code == 200 and kept.json()["unix_user"] == account
    cleared = client.patch(f"{USERS}/ann", json={"unix_user": None})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["unix_user"] is None
    assert unix_users(client) == {"admin": None, "ann": None, "bob": account}


def unusable() -> list[tuple[str, str]]:
    """(account, what its refusal says) for accounts no job may run under."""
    own = "jobs never run as root" if os.getuid() == 0 else "the server's own account"
    return [
        ("gpt-no-such-account", "useradd gpt-no-such-account"),
        ("root", "jobs never run as root"),
        (own_account(), own),
        ("Bad Name", "is not a Unix account name"),
    ]


@pytest.mark.parametrize(("name", "says"), unusable())
def test_an_account_jobs_must_not_run_under_is_refused_and_nothing_is_stored(
    app: tuple[TestClient, Platform], name: str, says: str
) -> None:
    client, _ = app
    create_user(client, "ann")
    error = refused(
        client.patch(f"{USERS}/ann", json={"unix_user": name}), 422, "unix_user_not_allowed"
    )
    assert says in error["message"], error["message"]
    assert error["details"]["fields"] == [{"field": "unix_user", "message": error["message"]}]
    post = client.post(USERS, json={"name": "cy", "unix_user": name})
    assert refused(post, 422, "unix_user_not_allowed")["message"] == error["message"]
    assert unix_users(client) == {"admin": None, "ann": None}, "nothing stored"


def test_a_refused_change_keeps_the_mapping(app: tuple[TestClient, Platform], account: str) -> None:
    client, _ = app
    create_user(client, "ann", unix_user=account)
    refused(
        client.patch(f"{USERS}/ann", json={"unix_user": "root", "weight": 3}),
        422,
        "unix_user_not_allowed",
    )
    assert unix_users(client)["ann"] == account
    assert client.get(USERS).json()[1]["weight"] == 1, "nothing of the change stored"


@pytest.mark.parametrize("name", ["a" * 33, 7, ["root"]])
def test_a_name_too_long_or_no_string_is_refused_by_the_schema(
    app: tuple[TestClient, Platform], name: object
) -> None:
    client, _ = app
    create_user(client, "ann")
    error = refused(client.patch(f"{USERS}/ann", json={"unix_user": name}), 422, "invalid_request")
    assert error["details"]["fields"][0]["field"].startswith("unix_user")


def test_only_admins_map_users_to_accounts(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    create_user(client, "ann")
    token = client.post("/api/v1/tokens", json={"name": "t", "user": "ann"}).json()["token"]
    ann = {"Authorization": f"Bearer {token}"}
    patch = client.patch(f"{USERS}/ann", json={"unix_user": "nobody"}, headers=ann)
    refused(patch, 403, "forbidden")
    post = client.post(USERS, json={"name": "cy", "unix_user": "nobody"}, headers=ann)
    refused(post, 403, "forbidden")
    refused(client.get(USERS, headers=ann), 403, "forbidden")
    refused(client.patch(f"{USERS}/nobody", json={"unix_user": None}), 404, "not_found")
    assert unix_users(client) == {"admin": None, "ann": None}
