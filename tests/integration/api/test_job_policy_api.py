"""The policy fields of a job spec through the API, on SQLite and on PostgreSQL: priority by
role, preemptible, GPU types, max runtime and grace period."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, running_app, submit, wait_job

JOBS = "/api/v1/jobs"
OK = {"command": ["true"]}


@pytest.fixture
def client(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    settings = make_settings(tmp_path / "data", database_url, max_grace_seconds=600)
    with running_app(settings) as (client, _platform):
        yield client


@pytest.fixture
def member(client: TestClient) -> dict[str, str]:
    """Headers that make a request as a member of the default team."""
    body = {"name": "mia", "role": "member", "teams": ["default"]}
    assert client.post("/api/v1/users", json=body).status_code == 201
    token = client.post("/api/v1/tokens", json={"user": "mia"}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def error_of(response, status: int) -> dict:  # noqa: ANN001 - an httpx response
    assert response.status_code == status, response.text
    return response.json()["error"]


def test_the_policy_fields_are_kept_and_shown(client: TestClient) -> None:
    spec = OK | {
        "preemptible": False,
        "gpu_types": [" a100 ", "A100", "H100"],
        "max_runtime_seconds": 7200,
        "grace_period_seconds": 60,
        "resources": {"gpus": 1},
    }
    job = submit(client, ["true"], **{k: v for k, v in spec.items() if k != "command"})
    assert job["spec"]["gpu_types"] == ["a100", "H100"], "stripped, duplicates dropped"
    assert (job["spec"]["max_runtime_seconds"], job["spec"]["grace_period_seconds"]) == (7200, 60)
    assert job["preemptible"] is False and job["spec"]["preemptible"] is False
    done = wait_job(client, job["id"])
    assert done["status"] == "succeeded"
    assert (done["preemptions"], done["checkpoint_at"]) == (0, None)
    attempt = done["attempts_detail"][0]
    assert attempt["stop_reason"] is None
    ran = attempt["ended_at"] - attempt["started_at"]  # its one GPU, for as long as it ran
    assert done["attained_gpu_seconds"] == pytest.approx(ran)


def test_defaults(client: TestClient) -> None:
    job = submit(client, ["true"])
    assert job["preemptible"] is True and job["blockers"] == []
    spec = job["spec"]
    assert (spec["gpu_types"], spec["max_runtime_seconds"], spec["grace_period_seconds"]) == (
        [],
        None,
        None,
    )


def test_a_member_may_not_submit_above_the_member_priority(
    client: TestClient, member: dict[str, str]
) -> None:
    assert client.post(JOBS, json=OK | {"priority": 100}, headers=member).status_code == 201
    assert client.post(JOBS, json=OK | {"priority": -1000}, headers=member).status_code == 201
    error = error_of(client.post(JOBS, json=OK | {"priority": 101}, headers=member), 403)
    assert error["code"] == "priority_not_allowed"
    assert "-1000..100" in error["message"]


def test_an_admin_may_submit_up_to_1000(client: TestClient) -> None:
    assert client.post(JOBS, json=OK | {"priority": 1000}).status_code == 201
    error = error_of(client.post(JOBS, json=OK | {"priority": 1001}), 422)
    assert error["code"] == "invalid_request"


def test_a_gpu_type_the_pool_lacks_is_refused_at_submit(client: TestClient) -> None:
    body = OK | {"resources": {"gpus": 1}, "gpu_types": ["H100"]}
    error = error_of(client.post(JOBS, json=body), 422)
    assert error["code"] == "unsatisfiable"
    assert "H100" in error["message"] and "GPU type it has" in error["message"]
    either = OK | {"resources": {"gpus": 1}, "gpu_types": ["H100", "a100"]}
    assert client.post(JOBS, json=either).status_code == 201, "any of the types will do"
    # a type names a model as a whole name: an A10 is not the pool's A100s
    smaller = OK | {"resources": {"gpus": 1}, "gpu_types": ["A10"]}
    assert error_of(client.post(JOBS, json=smaller), 422)["code"] == "unsatisfiable"


@pytest.mark.parametrize(
    "fields",
    [
        {"gpu_types": [""]},
        {"gpu_types": ["   "]},
        {"gpu_types": ["x" * 65]},
        {"gpu_types": [f"T{i}" for i in range(17)]},
        {"gpu_types": "A100"},
        {"max_runtime_seconds": 0},
        {"max_runtime_seconds": -5},
        {"max_runtime_seconds": 91 * 86400},
        {"max_runtime_seconds": "NaN"},
        {"grace_period_seconds": -1},
        {"preemptible": "perhaps"},
    ],
)
def test_invalid_policy_fields(client: TestClient, fields: dict) -> None:
    assert error_of(client.post(JOBS, json=OK | fields), 422)["code"] == "invalid_request"


def test_a_grace_period_above_the_server_maximum_is_refused(client: TestClient) -> None:
    error = error_of(client.post(JOBS, json=OK | {"grace_period_seconds": 601}), 422)
    assert error["code"] == "invalid_request" and "600" in error["message"]
    assert client.post(JOBS, json=OK | {"grace_period_seconds": 600}).status_code == 201
