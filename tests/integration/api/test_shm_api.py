"""A job's /dev/shm through the API with real runner processes: sized as it asks
(``shm_bytes``, a byte quantity) in its sandbox, and a size it cannot have refused with a
422 that says what to change."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, refused, running_app, submit, wait_job

MIB = 1024**2
SHM_SIZE = "import os; s = os.statvfs('/dev/shm'); print('SHM=%d' % (s.f_blocks * s.f_frsize))"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path / "data")) as (client, platform):
        if not platform.settings.isolated:
            pytest.skip("the sandbox is off here: /dev/shm is sized by the sandbox")
        yield client


def log_of(client: TestClient, job_id: int) -> str:
    return client.get(f"/api/v1/jobs/{job_id}/logs").json()["text"]


def test_the_job_s_dev_shm_is_the_size_it_asked_for(client: TestClient) -> None:
    job = submit(client, [sys.executable, "-c", SHM_SIZE], shm_bytes="8MiB")
    assert job["spec"]["shm_bytes"] == 8 * MIB
    done = wait_job(client, job["id"])
    assert done["status"] == "succeeded", done
    assert f"SHM={8 * MIB}" in log_of(client, job["id"])
    assert "LimitsNotEnforced" not in [e["reason"] for e in done["events"]]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"shm_bytes": "2GiB", "resources": {"memory_bytes": "1GiB"}}, "larger than the job's"),
        ({"shm_bytes": "512KiB"}, "at least 1MiB"),
        ({"shm_bytes": "lots"}, "shm_bytes"),
    ],
)
def test_a_dev_shm_it_cannot_have_is_a_422_that_says_what_to_do(
    client: TestClient, fields: dict, says: str
) -> None:
    answer = client.post("/api/v1/jobs", json={"command": ["true"], **fields})
    error = refused(answer, 422, "invalid_request")
    assert says in error["message"] and error["details"]["fields"][0]["field"] == "shm_bytes"
