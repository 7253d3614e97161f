"""Held jobs through the API, on SQLite and PostgreSQL, with real runner processes: a job
submitted held (or held while pending) waits with reason Held, is never started while jobs
queued after it run, says so in why, and runs once released; its events say who did what."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import (
    create_user,
    make_settings,
    refused,
    running_app,
    submit,
    wait_job,
)


def until(marker: Path) -> list[str]:
    """A command that runs until ``marker`` exists (two minutes at most)."""
    wait = (
        "import os, time\n"
        "for _ in range(2400):\n"
        f"    if os.path.exists({str(marker)!r}): break\n"
        "    time.sleep(0.05)\n"
    )
    return [sys.executable, "-c", wait]


@pytest.fixture
def client(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path / "data", database_url)) as (client, _platform):
        yield client


def post(client: TestClient, job_id: int, action: str) -> dict:
    answer = client.post(f"/api/v1/jobs/{job_id}/{action}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_job_submitted_held_never_starts_until_released(client: TestClient) -> None:
    held = submit(client, ["true"], hold=True)
    assert (held["status"], held["reason"]) == ("pending", "Held")
    assert held["message"] == f"held at submission: gpupool release {held['id']}"
    later = submit(client, ["true"])  # the scheduler has run past the held job once it ends
    assert wait_job(client, later["id"])["status"] == "succeeded"
    shown = client.get(f"/api/v1/jobs/{held['id']}").json()
    assert (shown["status"], shown["reason"], shown["attempts"]) == ("pending", "Held", 0)
    why = client.get(f"/api/v1/jobs/{held['id']}/why").json()
    assert why["code"] == "Held" and f"gpupool release {held['id']}" in why["summary"]
    assert why["eta"] is None and "held" in why["eta_unknown"]
    released = post(client, held["id"], "release")
    assert released["reason"] == "Queued" and released["message"].startswith("released by admin")
    done = wait_job(client, held["id"])
    assert done["status"] == "succeeded"
    events = [(e["reason"], e["message"]) for e in done["events"]]
    assert events[:3] == [
        ("Submitted", "submitted by admin to default"),
        ("Held", "held at submission"),
        ("Released", "released by admin"),
    ]


def test_a_pending_job_held_keeps_held_past_its_dependencies_until_released(
    client: TestClient, exchange: Path
) -> None:
    marker = exchange / "go"
    first = submit(client, until(marker), workdir=str(exchange))
    waiter = submit(client, ["true"], depends_on=[str(first["id"])])
    held = post(client, waiter["id"], "hold")
    assert (held["reason"], held["message"]) == (
        "Held",
        f"held by admin: gpupool release {waiter['id']}",
    )
    assert post(client, waiter["id"], "hold")["reason"] == "Held"  # again: as it is
    marker.touch()
    assert wait_job(client, first["id"])["status"] == "succeeded"
    later = submit(client, ["true"])
    assert wait_job(client, later["id"])["status"] == "succeeded"
    shown = client.get(f"/api/v1/jobs/{waiter['id']}").json()
    assert (shown["status"], shown["reason"]) == ("pending", "Held")  # its dependency is met
    post(client, waiter["id"], "release")
    assert wait_job(client, waiter["id"])["status"] == "succeeded"


def test_only_a_pending_job_is_held_and_release_leaves_others_as_they_are(
    client: TestClient,
) -> None:
    done = submit(client, ["true"])
    wait_job(client, done["id"])
    error = refused(client.post(f"/api/v1/jobs/{done['id']}/hold"), 409, "conflict")
    assert "only a pending job can be held" in error["message"]
    refused(client.post(f"/api/v1/jobs/{done['id']}/release"), 409, "conflict")
    sleeper = submit(client, ["sleep", "60"])
    free = submit(client, ["true"], depends_on=[str(sleeper["id"])], hold=False)
    shown = post(client, free["id"], "release")  # pending, not held: answered as it is
    assert shown["status"] == "pending" and shown["reason"] == "Dependency"
    post(client, sleeper["id"], "cancel")
    refused(client.post("/api/v1/jobs/999999/hold"), 404, "not_found")


def test_a_held_job_may_be_cancelled(client: TestClient) -> None:
    held = submit(client, ["true"], hold=True)
    post(client, held["id"], "cancel")
    assert wait_job(client, held["id"])["status"] == "cancelled"
    refused(client.post(f"/api/v1/jobs/{held['id']}/release"), 409, "conflict")


def test_every_task_of_an_array_submitted_held_is_held(client: TestClient) -> None:
    answer = client.post(
        "/api/v1/jobs", json={"command": ["true"], "hold": True, "array": {"indexes": "0-2"}}
    )
    assert answer.status_code == 201, answer.text
    ids = answer.json()["job_ids"]
    tasks = [client.get(f"/api/v1/jobs/{job_id}").json() for job_id in ids]
    assert [(t["reason"], t["message"]) for t in tasks] == [
        ("Held", f"held at submission: gpupool release {job_id}") for job_id in ids
    ]
    post(client, ids[1], "release")
    assert wait_job(client, ids[1])["status"] == "succeeded"
    assert client.get(f"/api/v1/jobs/{ids[0]}").json()["reason"] == "Held"


def test_a_viewer_sees_a_held_job_but_may_not_hold_or_release_it(client: TestClient) -> None:
    create_user(client, "vera", role="viewer")
    token = client.post("/api/v1/tokens", json={"name": "t", "user": "vera"}).json()["token"]
    held = submit(client, ["true"], hold=True)
    viewer = {"Authorization": f"Bearer {token}"}
    for action in ("hold", "release"):
        answer = client.post(f"/api/v1/jobs/{held['id']}/{action}", headers=viewer)
        assert answer.status_code == 403, answer.text
    assert client.get(f"/api/v1/jobs/{held['id']}").json()["reason"] == "Held"
