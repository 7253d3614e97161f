"""Hostile input never gets a 500: text that cannot be stored (NUL, lone surrogates), numbers
that cannot be converted, log offsets past the end, a GPU type without GPUs. Each is refused
with a 4xx that names what to fix, nothing of it is stored, and a row stored before these
checks existed does not break the listings that show it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import gpupool.services.identity._users as users
from gpupool.domain.jobs import JobSpec
from gpupool.executors.fake import NeverStartsExecutor
from gpupool.services.platform import Platform
from gpupool.store.models import JobModel
from tests.support.platform import make_settings, running_app, submit, wait_job

UNSTORABLE = {"nul": "\x00", "surrogate": "\ud800", "low surrogate": "\udc80"}
JOB = {"command": ["true"]}
DIGITS = "1" + "0" * 5000  # past Python's int-string limit (4300 digits)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    """The API on an executor that never starts a job: nothing submitted here runs."""
    data = tmp_path_factory.mktemp("bad-input") / "data"
    with running_app(make_settings(data), executor=NeverStartsExecutor()) as opened:
        yield opened


@pytest.fixture
def client(app: tuple[TestClient, Platform]) -> TestClient:
    return app[0]


def send(client: TestClient, method: str, path: str, body: Any) -> Any:
    """``body`` as JSON text with \\u escapes: the only way a lone surrogate travels."""
    raw = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    return client.request(method, f"/api/v1{path}", content=raw, headers=headers)


def refused(response: Any, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"], error
    return error


def stored(client: TestClient) -> tuple:
    """What a refused request could have stored or changed, as the API shows it (leaving out
    what the control loop changes: jobs' statuses, teams' usage, tokens' last use)."""
    jobs = {job["id"] for job in get(client, "/jobs?limit=1000")}
    people = sorted(json.dumps(user, sort_keys=True) for user in get(client, "/users"))
    teams = {
        (t["name"], json.dumps(t["guarantee"]), t["limit"], t["weight"])
        for t in get(client, "/teams")
    }
    tokens = {(token["id"], token["name"]) for token in get(client, "/tokens")}
    return jobs, people, teams, tokens


def get(client: TestClient, path: str) -> Any:
    response = client.get(f"/api/v1{path}")
    assert response.status_code == 200, response.text
    return response.json()


# -- text that cannot be stored ----------------------------------------------------------------

# (method, path, body with X where the bad character goes, the field the error names)
TEXT_FIELDS = [
    ("POST", "/jobs", {"command": ["tr", "X"]}, "command.1"),
    ("POST", "/jobs", JOB | {"name": "X"}, "name"),
    ("POST", "/jobs", JOB | {"env": {"A": "X"}}, "env.A"),
    ("POST", "/jobs", JOB | {"env": {"AX": "1"}}, "env.A"),
    ("POST", "/jobs", JOB | {"workdir": "/tmp/X"}, "workdir"),
    ("POST", "/jobs", JOB | {"team": "X"}, "team"),
    ("POST", "/jobs", JOB | {"resources": {"gpus": 1}, "gpu_types": ["AX"]}, "gpu_types.0"),
    ("POST", "/teams", {"name": "tX"}, "name"),
    ("POST", "/teams", {"name": "t", "guarantee": {"AX": 1}}, "guarantee.A"),
    ("PUT", "/teams/default/quota", {"guarantee": {"AX": 1}}, "guarantee.A"),
    ("POST", "/users", {"name": "uX"}, "name"),
    ("POST", "/users", {"name": "u", "teams": ["X"]}, "teams.0"),
    ("POST", "/users", {"name": "u", "password": "long enough X"}, "password"),
    ("POST", "/users", {"name": "u", "unix_user": "aX"}, "unix_user"),
    ("PATCH", "/users/admin", {"teams": ["defaultX"]}, "teams.0"),
    ("PATCH", "/users/admin", {"password": "long enough X"}, "password"),
    ("POST", "/tokens", {"name": "X"}, "name"),
    ("POST", "/tokens", {"user": "X"}, "user"),
    ("POST", "/session", {"user": "admin", "password": "X"}, "password"),
    ("POST", "/session", {"user": "X", "password": "secret"}, "user"),
    ("POST", "/nodes/node-a/drain", {"reason": "disk X"}, "reason"),
]


@pytest.mark.parametrize("char", UNSTORABLE.values(), ids=UNSTORABLE.keys())
@pytest.mark.parametrize(("method", "path", "body", "field"), TEXT_FIELDS)
def test_text_that_cannot_be_stored_is_refused_naming_its_field(
    client: TestClient, method: str, path: str, body: dict, field: str, char: str
) -> None:
    before = stored(client)
    poisoned = json.loads(json.dumps(body).replace("X", json.dumps(char)[1:-1]))
    error = refused(send(client, method, path, poisoned), 422, "invalid_request")
    named = error["details"]["fields"][0]["field"]
    assert named.startswith(field), (named, field)
    assert ("NUL" if char == "\x00" else "lone surrogate") in error["message"]
    assert "\\u" in error["message"], "the character is shown as an escape"
    assert stored(client) == before, "nothing of a refused request is kept"


PARAMETERS = [
    ("GET", "/jobs?team=%00", "query.team"),
    ("GET", "/jobs?user=a%00b", "query.user"),
    ("GET", "/nodes/node%00", "path.name"),
    ("POST", "/nodes/node%00/drain", "path.name"),
    ("DELETE", "/nodes/node%00", "path.name"),
    ("PATCH", "/users/a%00b", "path.name"),
    ("PUT", "/teams/a%00b/quota", "path.name"),
]


def test_parameters_a_database_cannot_take_are_refused_on_every_database(
    database_url: str, tmp_path: Path
) -> None:
    """PostgreSQL refuses NUL even in a lookup's WHERE clause, and ids past its 32-bit
    integers: both were 500s."""
    settings = make_settings(tmp_path / "data", database_url=database_url)
    with running_app(settings, executor=NeverStartsExecutor()) as (client, _platform):
        for method, path, field in PARAMETERS:
            body = {} if method in ("PATCH", "PUT") else None
            response = client.request(method, f"/api/v1{path}", json=body)
            error = refused(response, 422, "invalid_request")
            assert error["details"]["fields"][0]["field"] == field
            assert "NUL" in error["message"]
        login = {"user": "ad\x00min", "password": "x"}
        assert (
            "NUL"
            in refused(send(client, "POST", "/session", login), 422, "invalid_request")["message"]
        )
        job = send(client, "POST", "/jobs", JOB).json()
        events = f"/api/v1/jobs/{job['id']}/events"
        refused(client.get(events, params={"after": 2**31}), 422, "invalid_request")
        assert client.get(events, params={"after": 2**31 - 1}).json() == []
        assert client.get("/api/v1/jobs", params={"team": "default"}).status_code == 200


# -- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/jobs", '{"command": ["true"], "priority": #}'.replace("#", DIGITS)),
        ("/jobs", '{"command": ["true"], "resources": {"memory_bytes": #}}'.replace("#", DIGITS)),
        (
            "/jobs",
            '{"command": ["true"], "resources": {"memory_bytes": #}}'.replace("#", DIGITS[:4000]),
        ),
        (
            "/jobs",
            '{"command": ["true"], "resources": {"gpu_memory_bytes": "#GiB"}}'.replace("#", DIGITS),
        ),
        ("/jobs", '{"command": ["true"], "resources": {"memory_bytes": Infinity}}'),
        ("/jobs", '{"command": ["true"], "resources": {"gpu_memory_bytes": 1e400}}'),
        ("/jobs", '{"command": ["true"], "resources": {"cpus": NaN}}'),
        ("/jobs", '{"command": ["true"], "resources": {"gpus": 1e400}}'),
        ("/jobs", '{"command": ["true"], "max_runtime_seconds": Infinity}'),
        ("/jobs", '{"command": ["true"], "grace_period_seconds": NaN}'),
        ("/teams", '{"name": "huge", "weight": Infinity}'),
        ("/teams", '{"name": "huge", "guarantee": {"*": #}}'.replace("#", DIGITS[:4000])),
        ("/users", '{"name": "huge", "weight": #}'.replace("#", DIGITS)),
        ("/tokens", '{"name": "huge", "expires_in_days": NaN}'),
    ],
    ids=lambda value: value[:60],
)
def test_numbers_too_long_or_not_finite_are_refused(
    client: TestClient, path: str, raw: str
) -> None:
    before = stored(client)
    headers = {"content-type": "application/json"}
    response = client.post(f"/api/v1{path}", content=raw.encode(), headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] in ("invalid_request", "invalid_weight")
    assert stored(client) == before


def test_a_byte_quantity_too_large_says_the_bound(client: TestClient) -> None:
    body = JOB | {"resources": {"memory_bytes": 10**30}}
    error = refused(send(client, "POST", "/jobs", body), 422, "invalid_request")
    assert error["details"]["fields"][0]["field"] == "resources.memory_bytes"
    assert "at most 1 EiB" in error["message"]


def test_a_number_past_the_digit_limit_says_so(client: TestClient) -> None:
    raw = '{"command": ["true"], "priority": #}'.replace("#", DIGITS)
    response = client.post(
        "/api/v1/jobs", content=raw, headers={"content-type": "application/json"}
    )
    assert "4300 digits" in refused(response, 422, "invalid_request")["message"]


@pytest.mark.parametrize(
    "query",
    ["/teams/history?hours=nan", "/teams/history?hours=inf", f"/teams/history?buckets={DIGITS}"],
    ids=lambda value: value[:40],
)
def test_query_numbers_too_long_or_not_finite_are_refused(client: TestClient, query: str) -> None:
    refused(client.get(f"/api/v1{query}"), 422, "invalid_request")


# -- a GPU type without GPUs -------------------------------------------------------------------


def test_a_gpu_type_without_gpus_is_refused_and_says_to_add_gpus(client: TestClient) -> None:
    before = stored(client)
    error = refused(
        send(client, "POST", "/jobs", JOB | {"gpu_types": ["A100"]}), 422, "gpu_type_without_gpus"
    )
    assert "--gpus" in error["message"] and "--gpu-memory" in error["message"]
    assert error["details"]["fields"][0]["field"] == "gpu_types"
    assert stored(client) == before
    for resources in ({"gpus": 1}, {"gpus": 0.5}, {"gpu_memory_bytes": "10GiB"}):
        body = JOB | {"gpu_types": ["A100"], "resources": resources}
        assert send(client, "POST", "/jobs", body).status_code == 201, resources


# -- what a notebook or a deployment runs is checked as a job's is ---------------------------

DEPLOYMENT = {"name": "bad-input", "command": ["true"]}
DERIVED = [  # (path, body, refused code): each was a 500 when the job's spec refused it
    ("/notebooks", {"gpu_types": [""]}, "invalid_request"),
    ("/notebooks", {"gpu_types": ["x" * 65], "resources": {"gpus": 1}}, "invalid_request"),
    ("/notebooks", {"gpu_types": ["A100"]}, "gpu_type_without_gpus"),
    ("/deployments", DEPLOYMENT | {"gpu_types": [" "]}, "invalid_request"),
    ("/deployments", DEPLOYMENT | {"gpu_types": ["A100"]}, "gpu_type_without_gpus"),
    ("/deployments", DEPLOYMENT | {"env": {"GPUPOOL_REPLICA_TOKEN": "x"}}, "invalid_request"),
    ("/deployments", DEPLOYMENT | {"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "invalid_request"),
    ("/deployments", DEPLOYMENT | {"env": {"1st": "x"}}, "invalid_request"),
]


@pytest.mark.parametrize(("path", "body", "code"), DERIVED, ids=lambda v: str(v)[:40])
def test_a_notebook_or_deployment_is_refused_what_a_job_would_be(
    client: TestClient, path: str, body: dict, code: str
) -> None:
    before = stored(client), get(client, path)
    error = refused(send(client, "POST", path, body), 422, code)
    assert error["details"]["fields"][0]["field"] in {"gpu_types", "env"}, error
    assert (stored(client), get(client, path)) == before


def test_a_deployment_or_notebook_gets_the_gpu_types_a_job_would(client: TestClient) -> None:
    """The same rules clean them: stripped, duplicates (ignoring case) dropped."""
    body = {"gpu_types": [" A100 ", "a100", "H100"], "resources": {"gpus": 1}}
    answer = send(client, "POST", "/notebooks", body)
    assert answer.status_code == 201, answer.text
    assert answer.json()["gpu_types"] == ["A100", "H100"]
    client.post(f"/api/v1/notebooks/{answer.json()['id']}/stop")


# -- log offsets -------------------------------------------------------------------------------


def test_a_log_offset_past_its_end_is_refused_with_its_size(tmp_path: Path) -> None:
    with running_app(make_settings(tmp_path / "data")) as (client, _platform):
        job = submit(client, [sys.executable, "-c", "print('hello', end='')"])
        assert wait_job(client, job["id"])["status"] == "succeeded"
        logs = f"/api/v1/jobs/{job['id']}/logs"
        end = client.get(logs, params={"offset": 5}).json()
        assert (end["text"], end["next_offset"], end["complete"]) == ("", 5, True)
        for path in (logs, f"{logs}/stream"):
            error = refused(client.get(path, params={"offset": 6}), 416, "offset_out_of_range")
            assert error["details"] == {"size": 5, "attempt": 1}
            assert "5 bytes" in error["message"]


def test_a_log_not_written_yet_has_size_zero(client: TestClient) -> None:
    job = send(client, "POST", "/jobs", JOB).json()
    logs = f"/api/v1/jobs/{job['id']}/logs"
    assert client.get(logs, params={"offset": 0}).json()["text"] == ""
    error = refused(client.get(logs, params={"offset": 1}), 416, "offset_out_of_range")
    assert error["details"]["size"] == 0


# -- rows stored before these checks -----------------------------------------------------------


def old_spec(**fields: Any) -> dict:
    """A spec as the server stores it (every field), to be changed as an older one let it be."""
    return JobSpec(**fields).model_dump(mode="json")


# more GPUs than any node has: it stays in the queue
OLD_SPEC = old_spec(command=["echo"], resources={"gpus": 8}, gpu_types=["A100"]) | {
    "name": "old\x00job",
    "command": ["echo", "\ud800", "ok"],
    "env": {"X": "a\udc00"},
    "workdir": "/tmp/a\x00b",
}


def test_a_stored_row_with_unstorable_text_does_not_break_the_listings(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    job_id = insert_job(platform, "old\x00job", OLD_SPEC)
    listed = {job["id"]: job for job in client.get("/api/v1/jobs").json()}
    shown = listed[job_id]
    assert shown["name"] == "old\ufffdjob"
    spec = shown["spec"]
    assert spec["command"] == ["echo", "\ufffd", "ok"] and spec["env"] == {"X": "a\ufffd"}
    assert (spec["workdir"], spec["gpu_types"]) == ("/tmp/a\ufffdb", ["A100"])
    for path in ("", "/why", "/events"):
        assert client.get(f"/api/v1/jobs/{job_id}{path}").status_code == 200, path
    queue = client.get("/api/v1/jobs/queue")
    assert queue.status_code == 200
    names = [job["name"] for team in queue.json()["teams"] for job in team["jobs"]]
    assert "old\ufffdjob" in names


def test_a_stored_job_that_breaks_a_newer_rule_still_runs(tmp_path: Path) -> None:
    """The control loop reads a stored spec as it was accepted (here: a GPU type without GPUs,
    refused at submit since), so one old row does not stop the pool."""
    with running_app(make_settings(tmp_path / "data")) as (client, platform):
        job_id = insert_job(platform, None, old_spec(command=["true"]) | {"gpu_types": ["A100"]})
        assert wait_job(client, job_id)["status"] == "succeeded"
        assert wait_job(client, submit(client, ["true"])["id"])["status"] == "succeeded"


def insert_job(platform: Platform, name: str | None, spec: dict) -> int:
    """A pending job of the admin written straight to the store, as an older server did."""
    with platform.db.session() as session:
        admin, team = users.get_user(session, "admin"), users.get_team(session, "default")
        job = JobModel(
            name=name,
            user_id=admin.id,
            team_id=team.id,
            spec=spec,
            status="pending",
            priority=0,
            gpus=0.0,
            submitted_at=platform.clock.now(),
            reason="Queued",
            message="waiting for the scheduler",
            attempts=0,
            preemptible=True,
            attained=0.0,
            preemptions=0,
        )
        session.add(job)
        session.flush()
        return job.id
