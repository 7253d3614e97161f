"""Bad input gets a 4xx with a stable code and a message that says what to do; never a 500."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, running_app, submit, wait_job

OK = {"command": ["true"]}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data = tmp_path_factory.mktemp("bad-input") / "data"
    with running_app(make_settings(data, max_body_bytes=64 * 1024)) as (client, _platform):
        yield client


def refused(client: TestClient, body: object, status: int, code: str) -> str:
    response = client.post("/api/v1/jobs", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    return error["message"]


@pytest.mark.parametrize(
    "gpus",
    [0, -1, -0.5, "NaN", "nan", "inf", "two", True, [1], {}, 1.5, 2.25],
)
def test_invalid_gpu_counts(client: TestClient, gpus: object) -> None:
    refused(client, OK | {"resources": {"gpus": gpus}}, 422, "invalid_request")


def test_a_fraction_with_more_than_one_gpu_says_what_to_do(client: TestClient) -> None:
    message = refused(client, OK | {"resources": {"gpus": 1.5}}, 422, "invalid_request")
    assert "whole number of GPUs" in message


def test_more_gpus_than_any_node_is_refused_at_submit(client: TestClient) -> None:
    message = refused(client, OK | {"resources": {"gpus": 8}}, 422, "unsatisfiable")
    assert "needs 8 GPUs" in message and "Ask for less" in message
    refused(
        client, OK | {"resources": {"gpus": 1, "gpu_memory_bytes": "200GiB"}}, 422, "unsatisfiable"
    )
    refused(client, OK | {"resources": {"cpus": 1000}}, 422, "unsatisfiable")
    assert not [j for j in client.get("/api/v1/jobs").json() if j["status"] == "pending"]


def test_unknown_team(client: TestClient) -> None:
    message = refused(client, OK | {"team": "nope"}, 422, "unknown_team")
    assert "gpupool teams" in message


@pytest.mark.parametrize("command", [[], [""], ["   "], "true", None, [1], ["a\x00b"]])
def test_empty_or_malformed_commands(client: TestClient, command: object) -> None:
    refused(client, {"command": command}, 422, "invalid_request")


@pytest.mark.parametrize(
    "env",
    [
        {"1BAD": "x"},
        {"A-B": "x"},
        {"": "x"},
        {"A B": "x"},
        {"GPUPOOL_JOB_ID": "7"},
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"OK": 3},
        {"OK": "a\x00"},
    ],
)
def test_invalid_environment(client: TestClient, env: dict) -> None:
    refused(client, OK | {"env": env}, 422, "invalid_request")


@pytest.mark.parametrize(
    "body",
    [
        OK | {"unknown": 1},
        OK | {"resources": {"gpu": 1}},
        OK | {"priority": 10**9},
        OK | {"resources": {"gpu_memory_bytes": "lots"}},
        OK | {"resources": {"memory_bytes": -5}},
        OK | {"version": 99},
        [],
        "text",
    ],
)
def test_other_invalid_bodies(client: TestClient, body: object) -> None:
    refused(client, body, 422, "invalid_request")


def test_invalid_json_and_oversized_bodies(client: TestClient) -> None:
    broken = client.post(
        "/api/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert broken.status_code == 422 and broken.json()["error"]["code"] == "invalid_request"
    huge = {"command": ["true"], "env": {"BIG": "x" * 100_000}}
    refused(client, huge, 413, "payload_too_large")
    chunks = (b"x" * 16_384 for _ in range(10))
    streamed = client.post(
        "/api/v1/jobs", content=chunks, headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413


def test_unknown_ids_and_routes(client: TestClient) -> None:
    for path in ("/api/v1/jobs/999999", "/api/v1/nope", "/api/v1/nodes/nope"):
        response = client.get(path)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    wrong_type = client.get("/api/v1/jobs/abc")
    assert wrong_type.status_code == 422
    assert client.get("/api/v1/jobs", params={"status": "weird"}).status_code == 422
    assert client.get("/api/v1/jobs/1/logs", params={"offset": -1}).status_code == 422


def test_no_token_or_a_wrong_token(client: TestClient) -> None:
    anonymous = client.get("/api/v1/jobs", headers={"Authorization": ""})
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthenticated"
    wrong = client.get("/api/v1/jobs", headers={"Authorization": "Bearer gpt_wrong"})
    assert wrong.status_code == 401


def test_a_job_that_writes_gigabytes_is_capped_and_the_server_stays_responsive(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path / "data", log_limit_bytes=1024**2)
    writer = (
        "import sys\nchunk = b'x' * 1048575 + b'\\n'\n"
        "for _ in range(2048): sys.stdout.buffer.write(chunk)"
    )
    with running_app(settings) as (client, _platform):
        job = submit(client, [sys.executable, "-c", writer])
        for _ in range(20):  # the API answers while the job writes 2 GiB
            assert client.get("/api/v1/health").status_code == 200
            assert client.get(f"/api/v1/jobs/{job['id']}").status_code == 200
        done = wait_job(client, job["id"], timeout=120)
        assert done["status"] == "succeeded"
        chunk = client.get(f"/api/v1/jobs/{job['id']}/logs", params={"offset": 1024**2 - 10}).json()
        assert "log limit" in chunk["text"]
        log_files = list((tmp_path / "data" / "jobs").rglob("output.log"))
        assert log_files and log_files[0].stat().st_size < 1024**2 + 1024
