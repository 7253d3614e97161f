"""Attained service through the API: the GPU time a job has received, its running attempt
counted up to now (a fake clock says when now is), earlier attempts kept."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.clock import ManualClock
from tests.support.platform import make_settings, running_app, submit, wait_job

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
HOUR = 3600.0


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[TestClient, ManualClock]]:
    """4 declared A100s; the platform's clock moves only when the test moves it."""
    clock = ManualClock(time.time())
    with running_app(make_settings(tmp_path / "data"), clock=clock) as (client, _platform):
        yield client, clock


def test_a_running_job_has_attained_the_gpu_time_of_its_running_attempt(
    app: tuple[TestClient, ManualClock],
) -> None:
    client, clock = app
    job = submit(client, SLEEP, resources={"gpus": 2})
    started = wait_job(client, job["id"], {"running"})["started_at"]
    clock.advance(HOUR)

    shown = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert (shown["status"], shown["preemptions"]) == ("running", 0)
    # two GPUs from the attempt's start until now (the clock moved an hour meanwhile)
    assert shown["attained_gpu_seconds"] == pytest.approx(2 * (clock.now() - started))
    listed = client.get("/api/v1/jobs").json()
    assert [j["attained_gpu_seconds"] for j in listed if j["id"] == job["id"]] == [
        shown["attained_gpu_seconds"]
    ]
    client.post(f"/api/v1/jobs/{job['id']}/cancel")
