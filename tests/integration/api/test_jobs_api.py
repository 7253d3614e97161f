"""The jobs API in-process, on SQLite and on PostgreSQL, with real runner processes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, running_app, submit, wait_for, wait_job

PRINT_GPUS = [sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"]


@pytest.fixture
def client(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path / "data", database_url)) as (client, _platform):
        yield client


def log_text(client: TestClient, job_id: int) -> str:
    return client.get(f"/api/v1/jobs/{job_id}/logs").json()["text"]


def test_a_one_gpu_job_sees_exactly_one_gpu(client: TestClient) -> None:
    job = submit(client, PRINT_GPUS, resources={"gpus": 1})
    done = wait_job(client, job["id"])
    assert done["status"] == "succeeded" and done["exit_code"] == 0
    visible = log_text(client, job["id"]).strip().split(",")
    assert visible == [done["placement"]["gpus"][0]["uuid"]]
    assert [e["reason"] for e in done["events"]][:2] == ["Submitted", "Placed"]


def test_a_cpu_job_sees_no_gpu(client: TestClient) -> None:
    job = submit(client, PRINT_GPUS)
    wait_job(client, job["id"])
    assert log_text(client, job["id"]).strip() == ""


def test_two_half_gpu_jobs_share_one_gpu(client: TestClient) -> None:
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    first = submit(client, sleep, resources={"gpus": 0.5})
    second = submit(client, sleep, resources={"gpus": 0.5})
    running = [wait_job(client, j["id"], {"running"}) for j in (first, second)]
    uuids = {job["placement"]["gpus"][0]["uuid"] for job in running}
    shares = [job["placement"]["gpus"][0]["share"] for job in running]
    assert len(uuids) == 1 and shares == [0.5, 0.5]
    node = client.get("/api/v1/nodes").json()[0]
    shared = [g for g in node["gpus"] if g["uuid"] in uuids][0]
    assert shared["used_share"] == 1.0 and {h["job_id"] for h in shared["holders"]} == {
        first["id"],
        second["id"],
    }
    for job in (first, second):
        client.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert wait_job(client, first["id"])["status"] == "cancelled"


def test_a_job_that_needs_more_than_is_free_waits_with_a_reason(client: TestClient) -> None:
    hold = submit(
        client, [sys.executable, "-c", "import time; time.sleep(60)"], resources={"gpus": 3}
    )
    wait_job(client, hold["id"], {"running"})
    big = submit(client, ["true"], resources={"gpus": 2})
    waiting = wait_for(lambda: _with_reason(client, big["id"], "InsufficientGpus"))
    assert waiting["status"] == "pending"
    assert waiting["message"] == "needs 2 GPUs on one node; the largest free block is 1 on node-a"
    assert waiting["position"] == 1
    client.post(f"/api/v1/jobs/{hold['id']}/cancel")
    assert wait_job(client, big["id"])["status"] == "succeeded"
    reasons = [e["reason"] for e in client.get(f"/api/v1/jobs/{big['id']}").json()["events"]]
    assert reasons.index("InsufficientGpus") < reasons.index("Placed") < reasons.index("Started")


def test_cancel_a_pending_job_and_a_finished_one(client: TestClient) -> None:
    hold = submit(
        client, [sys.executable, "-c", "import time; time.sleep(60)"], resources={"gpus": 4}
    )
    wait_job(client, hold["id"], {"running"})
    queued = submit(client, ["true"], resources={"gpus": 1})
    assert client.post(f"/api/v1/jobs/{queued['id']}/cancel").json()["status"] == "cancelled"
    client.post(f"/api/v1/jobs/{hold['id']}/cancel")
    ended = wait_job(client, hold["id"])
    assert ended["status"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{hold['id']}/cancel")
    assert again.status_code == 200
    finished = submit(client, ["true"])
    wait_job(client, finished["id"])
    refused = client.post(f"/api/v1/jobs/{finished['id']}/cancel")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict"


def test_exit_codes_and_logs(client: TestClient) -> None:
    job = submit(client, [sys.executable, "-c", "import sys; print('out'); sys.exit(5)"])
    done = wait_job(client, job["id"])
    assert (done["status"], done["exit_code"]) == ("failed", 5)
    assert "out" in log_text(client, job["id"])
    missing = wait_job(client, submit(client, ["/no/such/program"])["id"])
    assert missing["exit_code"] == 127


def _with_reason(client: TestClient, job_id: int, reason: str) -> dict | None:
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    return job if job["reason"] == reason else None
