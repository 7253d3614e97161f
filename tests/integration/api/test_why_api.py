"""Why a job waits, through the API: reason, position, blockers, estimated start, refusals.

A real platform in-process (real database, real processes); estimates come from the real
scheduler run forward, so the expected times follow from the jobs' recorded start times and
max runtimes, never from the wall clock.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.platform import make_settings, running_app, submit, wait_job
from tests.support.waiting import wait_for

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
HOUR = 3600.0


@pytest.fixture
def app(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Platform]]:
    """4 declared A100s on one node."""
    with running_app(make_settings(tmp_path / "data", database_url)) as (client, platform):
        yield client, platform


def why(client: TestClient, job_id: int) -> dict:
    answer = client.get(f"/api/v1/jobs/{job_id}/why")
    assert answer.status_code == 200, answer.text
    return answer.json()


def explained(client: TestClient, job_id: int) -> dict:
    """The answer once the scheduler has placed the job in its queue and an estimate exists."""

    def ready() -> dict | None:
        answer = why(client, job_id)
        return answer if answer["position"] and answer["eta"] is not None else None

    return wait_for(ready, 30.0, f"job {job_id} to be explained", 0.1)


def started_at(client: TestClient, job_id: int) -> float:
    attempt = client.get(f"/api/v1/jobs/{job_id}").json()["attempts_detail"][-1]
    return attempt["started_at"]


def test_a_waiting_job_says_why_where_it_stands_and_when_it_starts(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    holder = submit(client, SLEEP, resources={"gpus": 4}, max_runtime_seconds=HOUR)
    wait_job(client, holder["id"], {"running"})
    waiting = submit(client, SLEEP, resources={"gpus": 2}, max_runtime_seconds=600)

    answer = explained(client, waiting["id"])
    assert answer["status"] == "pending"
    assert answer["code"] == "InsufficientGpus"
    assert answer["position"] == 1
    assert "GPU" in answer["message"] and answer["summary"].startswith("it waits")
    assert answer["eta"] == pytest.approx(started_at(client, holder["id"]) + HOUR)
    assert answer["eta_unknown"] is None
    estimate = answer["estimate"]
    assert estimate["is_estimate"] is True
    assert (estimate["duration_seconds"], estimate["duration_basis"]) == (600, "max_runtime")
    assert "max runtime" in estimate["duration_text"]
    assert any("no new job" in line for line in estimate["assumes"])


def test_the_second_in_line_starts_after_the_first_has_run(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    holder = submit(client, SLEEP, resources={"gpus": 4}, max_runtime_seconds=HOUR)
    wait_job(client, holder["id"], {"running"})
    first = submit(client, SLEEP, resources={"gpus": 4}, max_runtime_seconds=600)
    second = submit(client, SLEEP, resources={"gpus": 4}, max_runtime_seconds=600)

    frees = started_at(client, holder["id"]) + HOUR
    assert explained(client, first["id"])["eta"] == pytest.approx(frees)
    later = explained(client, second["id"])
    assert later["position"] == 2
    assert later["eta"] == pytest.approx(frees + 600)


def test_a_job_without_max_runtime_is_assumed_to_run_like_its_users_past_jobs(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    done = submit(client, [sys.executable, "-c", "pass"], resources={"gpus": 1})
    wait_job(client, done["id"], {"succeeded"})
    holder = submit(client, SLEEP, resources={"gpus": 4}, max_runtime_seconds=HOUR)
    wait_job(client, holder["id"], {"running"})
    waiting = submit(client, SLEEP, resources={"gpus": 1})

    estimate = explained(client, waiting["id"])["estimate"]
    assert estimate["duration_basis"] == "user_median"
    assert "median of its user's" in estimate["duration_text"]


def test_a_running_and_an_ended_job_answer_plainly(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    running = submit(client, SLEEP, resources={"gpus": 1})
    wait_job(client, running["id"], {"running"})
    answer = why(client, running["id"])
    assert answer["status"] == "running"
    assert answer["summary"] == "it is running on node-a: it does not wait any more"
    assert (answer["eta"], answer["eta_unknown"], answer["estimate"]) == (None, None, None)
    assert (answer["position"], answer["blockers"]) == (None, [])

    ended = submit(client, [sys.executable, "-c", "raise SystemExit(3)"])
    wait_job(client, ended["id"])
    answer = why(client, ended["id"])
    assert answer["status"] == "failed"
    assert answer["summary"] == "it has ended: it failed (exit code 3)"
    assert answer["eta"] is None


def test_a_job_that_can_never_start_here_has_no_estimate_and_says_why(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    holder = submit(client, SLEEP, resources={"gpus": 4}, preemptible=False)
    wait_job(client, holder["id"], {"running"})
    client.post("/api/v1/teams", json={"name": "capped", "limit": 1})
    capped = submit(client, SLEEP, team="capped", resources={"gpus": 2})

    def decided() -> dict | None:
        answer = why(client, capped["id"])
        return answer if answer["code"] == "OverQuota" else None

    answer = wait_for(decided, 30.0, "the quota to be the reason", 0.1)
    assert answer["eta"] is None
    assert "cannot start" in answer["eta_unknown"]
    assert any(blocker.startswith("quota: team capped") for blocker in answer["blockers"])


def test_the_queue_lists_pending_jobs_by_team_in_order(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    assert client.post("/api/v1/teams", json={"name": "vision"}).status_code == 201
    holder = submit(client, SLEEP, resources={"gpus": 4}, max_runtime_seconds=HOUR)
    wait_job(client, holder["id"], {"running"})
    ids = [submit(client, SLEEP, resources={"gpus": 2})["id"] for _ in range(2)]
    other = submit(client, SLEEP, team="vision", resources={"gpus": 1})["id"]
    for job_id in [*ids, other]:
        explained(client, job_id)

    queue = client.get("/api/v1/jobs/queue")
    assert queue.status_code == 200, queue.text
    body = queue.json()
    teams = {team["team"]: team["jobs"] for team in body["teams"]}
    assert list(teams) == ["default", "vision"]
    assert [job["id"] for job in teams["default"]] == ids
    assert [job["position"] for job in teams["default"]] == [1, 2]
    assert [job["id"] for job in teams["vision"]] == [other]
    assert all(job["eta"] is not None for job in teams["default"] + teams["vision"])
    assert body["assumes"] and body["computed_at"] and body["waiting"] == 3


def test_team_history_counts_held_gpus_and_fair_shares(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    done = submit(
        client, [sys.executable, "-c", "import time; time.sleep(0.5)"], resources={"gpus": 2}
    )
    wait_job(client, done["id"], {"succeeded"})
    answer = client.get("/api/v1/teams/history", params={"hours": 1, "buckets": 12})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["pool_gpus"] == 4 and len(body["times"]) == 12
    assert body["bucket_seconds"] == pytest.approx(300)
    default = next(team for team in body["teams"] if team["team"] == "default")
    assert len(default["held"]) == len(default["fair"]) == len(default["demand"]) == 12
    assert sum(default["held"]) > 0, "the job's attempt overlaps the last bucket"
    assert all(d >= h for d, h in zip(default["demand"], default["held"], strict=True))
    assert all(f <= 4 + 1e-9 for f in default["fair"])


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"hours": 0}, "hours"),
        ({"hours": "nan"}, "hours"),
        ({"hours": "inf"}, "hours"),
        ({"hours": "a day"}, "hours"),
        ({"buckets": 100000}, "buckets"),
        ({"buckets": 0}, "buckets"),
    ],
)
def test_team_history_refuses_bad_windows(
    app: tuple[TestClient, Platform], params: dict, field: str
) -> None:
    client, _ = app
    answer = client.get("/api/v1/teams/history", params=params)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_request"
    assert field in answer.text


def test_unknown_and_foreign_jobs_are_clear_404s(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    hidden = submit(client, SLEEP)
    for path in ["/api/v1/jobs/999999/why", "/api/v1/jobs/2147483647/why"]:
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert answer.json()["error"]["code"] == "not_found"
    for path in ["/api/v1/jobs/abc/why", "/api/v1/jobs/0/why", "/api/v1/jobs/-1/why"]:
        answer = client.get(path)
        assert answer.status_code == 422, path
        assert answer.json()["error"]["code"] == "invalid_request"

    assert client.post("/api/v1/teams", json={"name": "nlp"}).status_code == 201
    user = {"name": "bob", "role": "member", "teams": ["nlp"]}
    assert client.post("/api/v1/users", json=user).status_code == 201
    token = client.post("/api/v1/tokens", json={"name": "t", "user": "bob"}).json()["token"]
    bob = {"Authorization": f"Bearer {token}"}
    answer = client.get(f"/api/v1/jobs/{hidden['id']}/why", headers=bob)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"
    queue = client.get("/api/v1/jobs/queue", headers=bob).json()
    assert queue["teams"] == [], "bob sees no other team's jobs"
    teams = client.get("/api/v1/teams/history", headers=bob).json()["teams"]
    assert [team["team"] for team in teams] == ["nlp"]
    assert (
        client.get("/api/v1/jobs/queue", headers={"Authorization": "Bearer x"}).status_code == 401
    )
