"""Job dependencies through the API, on SQLite and PostgreSQL, with real runner processes:
a job waits (reason Dependency) until the jobs it depends on end, then runs or is cancelled
(DependencyNeverSatisfied) as its condition says."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, refused, running_app, submit, wait_job

FAIL = [sys.executable, "-c", "raise SystemExit(3)"]


def held_until(marker: Path, code: int = 0) -> list[str]:
    """A command that runs until ``marker`` exists (two minutes at most), then exits
    ``code``."""
    wait = (
        "import os, time\n"
        "for _ in range(1200):\n"
        f"    if os.path.exists({str(marker)!r}): break\n"
        "    time.sleep(0.05)\n"
        f"raise SystemExit({code})"
    )
    return [sys.executable, "-c", wait]


@pytest.fixture
def client(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path / "data", database_url)) as (client, _platform):
        yield client


def test_a_job_waits_for_its_dependency_then_runs(client: TestClient, exchange: Path) -> None:
    release = exchange / "release"
    prep = submit(client, held_until(release), name="prep", workdir=str(exchange))
    train = submit(client, ["true"], name="train", depends_on=["prep"])
    assert train["spec"]["depends_on"] == [{"job": prep["id"], "condition": "afterok"}]
    assert train["status"] == "pending" and train["reason"] == "Dependency"
    assert train["message"] == f"waits for job {prep['id']} (prep) to succeed"
    wait_job(client, prep["id"], {"running"})
    shown = client.get(f"/api/v1/jobs/{train['id']}").json()
    assert (shown["status"], shown["reason"]) == ("pending", "Dependency")
    why = client.get(f"/api/v1/jobs/{train['id']}/why").json()
    assert why["code"] == "Dependency"
    assert why["summary"] == f"it waits for job {prep['id']} (prep) to succeed"
    assert why["eta"] is None and "depends on" in why["eta_unknown"]
    queue = client.get("/api/v1/jobs/queue").json()
    assert [j["code"] for t in queue["teams"] for j in t["jobs"]] == ["Dependency"]
    release.touch()
    done = wait_job(client, train["id"])
    assert done["status"] == "succeeded"
    reasons = [e["reason"] for e in done["events"]]
    assert reasons.index("Submitted") < reasons.index("Queued") < reasons.index("Started")
    queued = next(e for e in done["events"] if e["reason"] == "Queued")
    assert f"job {prep['id']} (prep) succeeded" in queued["message"]


def test_a_failed_dependency_cancels_the_job_and_its_own_waiters(client: TestClient) -> None:
    prep = submit(client, FAIL, name="prep")
    train = submit(client, ["true"], depends_on=[f"afterok:{prep['id']}"], name="train")
    evaluate = submit(client, ["true"], depends_on=[{"job": "train"}])
    assert wait_job(client, prep["id"])["status"] == "failed"
    for job, dep in ((train, prep), (evaluate, train)):
        done = wait_job(client, job["id"])
        assert (done["status"], done["reason"]) == ("cancelled", "DependencyNeverSatisfied")
        assert done["message"].startswith(f"job {dep['id']} ")
        assert "afterok" in done["message"] and done["attempts"] == 0
    assert "failed" in wait_job(client, train["id"])["message"]


def test_afterany_runs_after_a_failure_and_afternotok_only_after_one(
    client: TestClient,
) -> None:
    bad = submit(client, FAIL)
    good = submit(client, ["true"])
    after_any = submit(client, ["true"], depends_on=[f"afterany:{bad['id']}"])
    cleanup = submit(client, ["true"], depends_on=[f"afternotok:{bad['id']}"])
    not_needed = submit(client, ["true"], depends_on=[f"afternotok:{good['id']}"])
    assert wait_job(client, after_any["id"])["status"] == "succeeded"
    assert wait_job(client, cleanup["id"])["status"] == "succeeded"
    skipped = wait_job(client, not_needed["id"])
    assert (skipped["status"], skipped["reason"]) == ("cancelled", "DependencyNeverSatisfied")
    assert "afternotok" in skipped["message"] and "succeeded" in skipped["message"]


def test_a_job_waits_for_every_dependency(client: TestClient, exchange: Path) -> None:
    first, second = exchange / "first", exchange / "second"
    one = submit(client, held_until(first), workdir=str(exchange))
    two = submit(client, held_until(second), workdir=str(exchange), name="two")
    both = submit(client, ["true"], depends_on=[one["id"], f"afterany:{two['id']}"])
    assert both["message"] == f"waits for job {one['id']} to succeed"
    first.touch()
    wait_job(client, one["id"])

    def names_the_second() -> dict | None:
        job = client.get(f"/api/v1/jobs/{both['id']}").json()
        return job if job["message"] == f"waits for job {two['id']} (two) to end" else None

    from tests.support.waiting import wait_for

    assert wait_for(names_the_second, 30, "the message to name job two")["status"] == "pending"
    second.touch()
    assert wait_job(client, both["id"])["status"] == "succeeded"


def test_an_array_waits_as_a_whole(client: TestClient) -> None:
    prep = submit(client, ["true"])
    array = submit(client, ["true"], depends_on=[prep["id"]], array={"indexes": "0-2"})
    tasks = [wait_job(client, job_id) for job_id in array["job_ids"]]
    assert [t["status"] for t in tasks] == ["succeeded"] * 3
    assert all(
        t["spec"]["depends_on"] == [{"job": prep["id"], "condition": "afterok"}] for t in tasks
    )


def test_a_waiting_job_can_be_cancelled(client: TestClient, exchange: Path) -> None:
    release = exchange / "release"
    prep = submit(client, held_until(release), workdir=str(exchange))
    train = submit(client, ["true"], depends_on=[prep["id"]])
    cancelled = client.post(f"/api/v1/jobs/{train['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    release.touch()
    assert wait_job(client, prep["id"])["status"] == "succeeded"
    again = client.get(f"/api/v1/jobs/{train['id']}").json()
    assert (again["status"], again["reason"]) == ("cancelled", "Cancelled")


def test_unknown_ambiguous_and_repeated_dependencies_are_refused(client: TestClient) -> None:
    error = refused(
        client.post("/api/v1/jobs", json={"command": ["true"], "depends_on": [999]}),
        422,
        "unknown_dependency",
    )
    assert "job 999 is not a job of this team" in error["message"]
    body = {"command": ["true"], "depends_on": ["nosuch"]}
    error = refused(client.post("/api/v1/jobs", json=body), 422, "unknown_dependency")
    assert "no job of this team is named 'nosuch'" in error["message"]
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    first = submit(client, sleep, name="twin")
    second = submit(client, sleep, name="twin")
    body = {"command": ["true"], "depends_on": ["twin"]}
    error = refused(client.post("/api/v1/jobs", json=body), 422, "ambiguous_dependency")
    assert "2 jobs named 'twin'" in error["message"]
    body = {"command": ["true"], "depends_on": [first["id"], f"afterany:{first['id']}"]}
    error = refused(client.post("/api/v1/jobs", json=body), 422, "invalid_request")
    assert f"names job {first['id']} (twin) twice" in error["message"]
    body = {"command": ["true"], "depends_on": ["afterwards:1"]}
    refused(client.post("/api/v1/jobs", json=body), 422, "invalid_request")
    for job in (first, second):
        client.post(f"/api/v1/jobs/{job['id']}/cancel")
